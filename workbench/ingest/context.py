"""The collaborators the ingest classes share, passed as one value.

:class:`IngestContext` bundles what the extractor, the writer, the pipeline and the queue all
reach for — the store, the metrics, the clock, the chat model, the embedder, the search
engine's publisher and the settings — so each constructor takes the context and only the
parameters of its own job. A queue needs only the store, the metrics and the clock (its tests
build it without the rest); the classes that extract and write episodes ask for their parts
with :meth:`IngestContext.episode_parts`, which says what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.clock import Clock
from workbench.config import Settings
from workbench.embedding import Embedder
from workbench.index.publish import Publisher
from workbench.llm.client import ChatModel
from workbench.metrics import Metrics
from workbench.store import Store

__all__ = ["EpisodeParts", "IngestContext"]


@dataclass(frozen=True)
class EpisodeParts:
    """What extracting and writing episodes needs beyond the store, metrics and clock."""

    embedder: Embedder
    publisher: Publisher
    settings: Settings


@dataclass(frozen=True)
class IngestContext:
    """The shared collaborators of ingestion (see the module docstring)."""

    store: Store
    metrics: Metrics
    clock: Clock
    chat: ChatModel | None = None  # None: no LLM configured (episodes wait for one)
    embedder: Embedder | None = None
    # every writer of entities and facts publishes through it; the queue claims under it
    publisher: Publisher | None = None
    settings: Settings | None = None

    def episode_parts(self) -> EpisodeParts:
        """The embedder, publisher and settings, which extraction and writing need."""
        if self.embedder is None or self.publisher is None or self.settings is None:
            raise ValueError(
                "extracting and writing episodes needs an ingest context with an embedder, "
                "a publisher and settings"
            )
        return EpisodeParts(self.embedder, self.publisher, self.settings)
