"""Importance and stability (1–5) of memories, classified by the LLM in batches.

Statuses (spec, "Classification outcome", one per memory classified):

* ``success`` — the LLM classified it;
* ``failure`` — the LLM call or its parsing failed, or the reply left the memory out:
  the defaults 3/3 apply;
* ``fallback`` — no LLM is configured (``chat is None``, or it raises
  :class:`~workbench.errors.LLMNotConfigured`): the defaults 3/3 apply.

``knowledge_classification_requests_total{status}`` counts memories;
``knowledge_classification_latency_seconds`` observes each LLM call once (a batch).

:func:`classify_pending` classifies stored memories that have no classification (and retries
earlier failures/fallbacks) when an LLM is configured; it never marks memories ``fallback`` for
lack of an LLM, so they are classified once one is configured. The PERMANENT rule is applied
by the next maintenance run (the scheduler classifies right before each run), which records
the step in ``decay_history`` and ``knowledge_lifecycle_transitions_total``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from workbench.errors import InvalidInput, LLMError, LLMNotConfigured
from workbench.prompts import classify_memories as prompt
from workbench.results import ClassifyResult
from workbench.safety import scrub
from workbench.store import Store
from workbench.store import classification as sql

if TYPE_CHECKING:
    from workbench.llm import ChatModel
    from workbench.metrics import Metrics

log = logging.getLogger(__name__)

DEFAULT_IMPORTANCE = 3
DEFAULT_STABILITY = 3
BATCH_SIZE = 20
# the longest text ``classify_memory`` rates: a memory is a sentence or a paragraph, and the
# tool spends an LLM call no episode's budget counts, so its size is bounded
MAX_CLASSIFY_CHARS = 4_000
STATUSES = ("success", "failure", "fallback")


@dataclass(frozen=True)
class Classification:
    importance: int
    stability: int
    status: str
    error: str | None = None

    def as_dict(self) -> ClassifyResult:
        return {"importance": self.importance, "stability": self.stability,
                "status": self.status, "error": self.error}  # fmt: skip


def _default(status: str, error: str | None = None) -> Classification:
    return Classification(DEFAULT_IMPORTANCE, DEFAULT_STABILITY, status, scrub(error))


def _record(
    metrics: Metrics | None, results: Sequence[Classification], latency: float | None
) -> None:
    if metrics is None:
        return
    for i, result in enumerate(results):
        metrics.record_classification(result.status, latency if i == 0 else None)


def _classify_batch(
    chat: ChatModel, texts: Sequence[str], episode_uuid: str | None
) -> tuple[list[Classification], float | None]:
    started = time.perf_counter()
    try:
        reply = chat.complete(
            prompt.PROMPT_NAME,
            prompt.build_messages(list(texts)),
            prompt.MemoryClassifications,
            episode_uuid=episode_uuid,
        )
    except LLMNotConfigured as exc:
        return [_default("fallback", str(exc)) for _ in texts], None
    except (LLMError, ValidationError) as exc:
        log.warning("classification of %d memories failed (defaults 3/3 used): %s", len(texts), exc)
        return [
            _default("failure", f"{type(exc).__name__}: {exc}") for _ in texts
        ], time.perf_counter() - started
    latency = time.perf_counter() - started
    by_index: dict[int, Classification] = {}
    for item in reply.classifications:
        if 1 <= item.index <= len(texts) and item.index not in by_index:
            by_index[item.index] = Classification(
                int(item.importance), int(item.stability), "success"
            )
    missing = _default("failure", "the reply left this memory out")
    return [by_index.get(i, missing) for i in range(1, len(texts) + 1)], latency


def check_classify_text(text: object, max_chars: int) -> None:
    """:class:`InvalidInput` unless ``text`` is a text to rate: not blank, at most
    :data:`MAX_CLASSIFY_CHARS` characters (nor ``max_chars``, an episode's longest)."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("'text' must be a non-empty string")
    most = min(max_chars, MAX_CLASSIFY_CHARS)
    if len(text) > most:
        raise InvalidInput(
            f"'text' has {len(text)} characters; at most {most} (a memory to rate, not a document)"
        )


def classify_texts(
    chat: ChatModel | None,
    texts: Sequence[str],
    metrics: Metrics | None,
    episode_uuid: str | None = None,
    *,
    batch_size: int = BATCH_SIZE,
) -> list[Classification]:
    """One :class:`Classification` per text, in order (one LLM call per ``batch_size``)."""
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    results: list[Classification] = []
    for start in range(0, len(texts), batch_size):
        batch = texts[start : start + batch_size]
        if chat is None:
            found, latency = [_default("fallback", "no LLM configured") for _ in batch], None
        else:
            found, latency = _classify_batch(chat, batch, episode_uuid)
        _record(metrics, found, latency)
        results.extend(found)
    return results


def classify_pending(
    store: Store,
    chat: ChatModel | None,
    metrics: Metrics | None,
    limit: int = 500,
    *,
    batch_size: int = BATCH_SIZE,
    retry_failed: bool = True,
) -> dict[str, int]:
    """Classify up to ``limit`` stored memories without a classification; returns counts by
    status. Does nothing without an LLM (``chat is None``)."""
    counts = {status: 0 for status in STATUSES}
    if chat is None or limit <= 0:
        return {**counts, "classified": 0}
    pending = sql.pending_memories(store, limit, retry_failed)
    for start in range(0, len(pending), batch_size):
        batch = pending[start : start + batch_size]
        found = classify_texts(chat, [m["text"] for m in batch], metrics, batch_size=batch_size)
        sql.write_classifications(
            store,
            [
                (m["kind"], m["uuid"], c.importance, c.stability, c.status)
                for m, c in zip(batch, found)
            ],
        )
        for c in found:
            counts[c.status] += 1
    return {**counts, "classified": len(pending)}


__all__ = [
    "BATCH_SIZE",
    "Classification",
    "DEFAULT_IMPORTANCE",
    "DEFAULT_STABILITY",
    "STATUSES",
    "classify_pending",
    "classify_texts",
]
