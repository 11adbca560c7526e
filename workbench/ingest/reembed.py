"""When an entity whose summary grew gets a new vector.

Each episode that mentions an entity may add to its summary (``merge_summary`` appends the new
text and drops the oldest past 1,200 characters). Embedding the whole summary again for every
mention costs an embedding of up to ~300 tokens per entity per episode; with the local embedder
that was most of an episode's ingestion cost. :class:`ReembedPolicy` keeps an entity's vector
while the summary text it has not seen stays under ``fraction`` of the summary, so with the
default 0.2 the vector always reflects at least ~80% of the current summary. The summary itself
(what tools return, what the keyword index holds) is always current.

What each entity's vector has not seen is kept in memory: an entity this process has not
embedded is embedded at its first update, the safe side (so is one forgotten when more than
``max_entities`` are tracked).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["ReembedPolicy"]


class ReembedPolicy:
    """Per entity uuid, how many characters its summary gained since its vector was made."""

    def __init__(self, fraction: float = 0.2, max_entities: int = 200_000):
        if not 0.0 <= fraction <= 1.0:
            raise ValueError("fraction must be between 0 and 1")
        self.fraction = fraction
        self.max_entities = max_entities
        self._unseen: dict[str, int] = {}
        self._lock = threading.Lock()

    def due(self, uuid: str, added: int, summary_chars: int) -> bool:
        """Whether the entity's summary, grown by ``added`` characters to ``summary_chars``,
        needs a new vector: yes when ``fraction`` is 0, when this process does not know what
        the stored vector saw, or when the unseen text reaches ``fraction`` of the summary."""
        if self.fraction <= 0.0:
            return True
        with self._lock:
            unseen = self._unseen.get(uuid)
        return unseen is None or unseen + added >= self.fraction * summary_chars

    def written(self, embedded: Iterable[str], grown: Iterable[tuple[str, int]]) -> None:
        """After a commit: the ``embedded`` entities' vectors are new; the ``grown`` ones
        (uuid, characters added) kept theirs."""
        if self.fraction <= 0.0:
            return
        with self._lock:
            if len(self._unseen) > self.max_entities:
                self._unseen.clear()  # forgotten ones are embedded at their next update
            for uuid in embedded:
                self._unseen[uuid] = 0
            for uuid, added in grown:
                if uuid in self._unseen:
                    self._unseen[uuid] += added

    def __len__(self) -> int:
        return len(self._unseen)
