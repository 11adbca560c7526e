"""Prompt caching (spec, "Prompt caching rules"), as pure functions.

1. Caching applies only when it is enabled (``SVC_KNOWLEDGE_PROMPT_CACHE_ENABLED``), the base
   URL is the hosted aggregator (``openrouter.ai``) and the model is of the one family that
   supports explicit cache markers there: Anthropic Claude.
2. When it applies, every message becomes multipart (a content-parts array) and an explicit
   ``cache_control: {"type": "ephemeral"}`` marker is put on the last content part.
   Extension: the last part of the system message gets a marker too, because the system
   message holds the stable part of our prompts (instructions, schema) and a breakpoint at its
   end lets later requests with other episode text read it from the cache (the provider allows
   up to four markers).
3. Statistics come from ``cache_read_tokens``/``cache_write_tokens`` (top level of ``usage``
   or inside ``prompt_tokens_details``) and ``prompt_tokens_details.cached_tokens``; a hit is a
   response with cached tokens, so the first occurrence of a prompt is a miss.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

AGGREGATOR_HOSTS = ("openrouter.ai",)
CACHE_MARKER = {"type": "ephemeral"}


def is_aggregator(base_url: str | None) -> bool:
    host = (urlparse(base_url or "").hostname or "").lower()
    return any(host == h or host.endswith("." + h) for h in AGGREGATOR_HOSTS)


def is_caching_family(model: str | None) -> bool:
    """Anthropic Claude models (``anthropic/claude-sonnet-4.5``, ``claude-3-5-haiku`` …)."""
    name = (model or "").lower()
    return name.startswith("anthropic/") or "claude" in name.rsplit("/", 1)[-1]


def caching_applies(enabled: bool, base_url: str | None, model: str | None) -> bool:
    return bool(enabled) and is_aggregator(base_url) and is_caching_family(model)


def _parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, list):
        return [
            dict(part) if isinstance(part, dict) else {"type": "text", "text": str(part)}
            for part in content
        ]
    return [{"type": "text", "text": "" if content is None else str(content)}]


def to_multipart(messages: list[dict[str, Any]], mark_system: bool = True) -> list[dict[str, Any]]:
    """Messages as content-part arrays with ``cache_control`` on the last part (rule 2)."""
    out: list[dict[str, Any]] = []
    for msg in messages:
        if msg.get("role") == "tool" or msg.get("tool_calls"):
            out.append(dict(msg))
            continue
        parts = _parts(msg.get("content"))
        if mark_system and msg.get("role") == "system" and parts:
            parts[-1]["cache_control"] = dict(CACHE_MARKER)
        out.append({**msg, "content": parts})
    for msg in reversed(out):
        content = msg.get("content")
        if isinstance(content, list) and content:
            content[-1]["cache_control"] = dict(CACHE_MARKER)
            break
    return out


def _int(value: Any) -> int:
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0


def cache_tokens(usage: dict[str, Any]) -> tuple[int, int]:
    """``(cached read tokens, cache write tokens)`` from a raw ``usage`` object."""
    details = usage.get("prompt_tokens_details") or {}
    read = max(
        _int(details.get("cached_tokens")),
        _int(usage.get("cache_read_tokens")),
        _int(details.get("cache_read_tokens")),
        _int(usage.get("cache_read_input_tokens")),
    )
    write = max(
        _int(usage.get("cache_write_tokens")),
        _int(details.get("cache_write_tokens")),
        _int(usage.get("cache_creation_input_tokens")),
    )
    return read, write
