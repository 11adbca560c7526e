"""Secrets out of any text the product stores or returns, and limits on untrusted JSON.

**Scrubbing.** An upstream's error text may echo what it was sent (gateways repeat the
``Authorization`` header), and that text flows into the database (``queue.error_message``,
``llm_calls.error_message``, ``episodes.status_detail``), into tool results and exports, and
into logs. :func:`scrub` replaces every registered secret value and anything shaped like a
bearer token, an ``api_key=…`` pair or an ``sk-…`` key by ``[REDACTED]``. Secrets are
registered once by whoever holds them (the settings' keys and token, a client given a key):
:func:`register_secret` keeps them in one process-wide set, as logging's handlers are
process-wide, so a store function or a log formatter needs no handle to pass them along.

**JSON limits.** Python's parser recurses once per nesting level, so a document nested a few
thousand levels deep raises ``RecursionError`` — a crash where the caller deserves a 400.
:func:`json_depth` measures nesting without parsing (strings are skipped) so bodies and JSON
episodes are refused before anything parses them.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable

REDACTED = "[REDACTED]"
MIN_SECRET = 4  # shorter values would redact ordinary words
MAX_JSON_DEPTH = 64

_PATTERNS = (
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"),
    re.compile(
        r"(?i)((?:api[_-]?key|token|password|secret|authorization)[\"']?\s*[:=]\s*[\"']?)"
        r"[^\s\"',;]+"
    ),
    re.compile(r"\bsk-[A-Za-z0-9_-]{8,}"),
)

_lock = threading.Lock()
_registered: set[str] = set()


def register_secret(*values: str | None) -> None:
    """Scrub these values from now on, in this process (empty and very short ones are
    ignored)."""
    with _lock:
        _registered.update(v for v in values if v and len(v) >= MIN_SECRET)


class Redactor:
    """:func:`scrub` with extra secrets of its own (the process-wide ones always apply)."""

    def __init__(self, secrets: Iterable[str | None] = ()):
        self._secrets: set[str] = set()
        for secret in secrets:
            self.add(secret)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= MIN_SECRET:
            self._secrets.add(secret)

    def __call__(self, text: str) -> str:
        with _lock:
            secrets = self._secrets | _registered
        for secret in sorted(secrets, key=len, reverse=True):
            text = text.replace(secret, REDACTED)
        for pattern in _PATTERNS:
            text = pattern.sub(_keep_prefix, text)
        return text


def _keep_prefix(match: re.Match[str]) -> str:
    return (match.group(1) if match.groups() else "") + REDACTED


_default = Redactor()


def scrub(text: str | None) -> str | None:
    """``text`` with every registered secret and secret-looking token replaced."""
    return None if text is None else _default(str(text))


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = re.compile(rb"[\[\]{}]")


def json_depth(text: str | bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """The nesting depth of a JSON text (objects and arrays), counting no further than
    ``limit + 1``; brackets inside strings do not count."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    depth = deepest = 0
    for bracket in _BRACKETS.findall(_STRING.sub(b'""', data)):
        if bracket in (b"{", b"["):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        else:
            depth -= 1
    return deepest
