"""Keep what was said: an accepted episode's passages are written and indexed with it.

``add_memory`` calls :class:`PassageWriter` in three steps: :meth:`~PassageWriter.prepare`
(split and embed, before the transaction: the slow part, holding no lock),
:meth:`~PassageWriter.write` (inside the transaction that inserts the episode) and
:meth:`~PassageWriter.publish` (after it, under the publish gate: the search engine indexes
the passages). So an episode is searchable by what it says the moment ``add_memory``
returns, before extraction and with no LLM at all.

An embedder that fails does not lose the episode: its passages are written without vectors
(found by their words until ``workbench reembed`` embeds them) and the failure is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from workbench.ingest.passages import passage_rows
from workbench.store import Store
from workbench.store import graph as g
from workbench.store.passages import insert_passages

log = logging.getLogger("workbench.ingest.verbatim")

__all__ = ["PassageWriter", "PreparedPassages"]


@dataclass
class PreparedPassages:
    """An episode's passage rows and their vectors (None: the embedder failed)."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    vectors: np.ndarray | None = None


class PassageWriter:
    """Splits, embeds, writes and publishes an episode's passages (see the module doc)."""

    def __init__(self, store: Store, embedder: Any, publisher: Any):
        self.store = store
        self.embedder = embedder
        self.publisher = publisher

    def prepare(self, episode: Mapping[str, Any]) -> PreparedPassages:
        rows = passage_rows(episode)
        if not rows:
            return PreparedPassages()
        try:
            vectors = np.asarray(self.embedder.embed([r["text"] for r in rows]), np.float32)
        except Exception:  # noqa: BLE001 - the episode is still accepted (see the module doc)
            log.warning(
                "embedding the passages of episode %s failed: they are searchable by their "
                "words only until `workbench reembed`",
                episode["uuid"],
                exc_info=True,
            )
            return PreparedPassages(rows)
        return PreparedPassages(rows, vectors)

    def write(self, prepared: PreparedPassages) -> None:
        """Inside the caller's transaction."""
        insert_passages(self.store, prepared.rows)
        if prepared.vectors is not None:
            uuids = [r["uuid"] for r in prepared.rows]
            g.insert_embeddings(self.store, "passage", uuids, prepared.vectors, self.embedder.model)

    def publish(self, prepared: PreparedPassages) -> None:
        """After the commit, under the publish gate."""
        self.publisher.upserted(
            [("passage", prepared.rows, prepared.vectors)], "accepting an episode"
        )
