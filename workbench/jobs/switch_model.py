"""Re-embed a whole database with another embedding model (``workbench reembed``).

A database holds vectors of one size (``meta.embedding_dim``), from one model
(``meta.embedding_model``): switching models needs every entity, fact and passage embedded
again. This
writes the new vectors into staging tables, batch by batch (a progress bar on the command line),
then swaps them in with the new size and model in one transaction: stopped half-way, the
database still holds its old vectors and works with the old model; run again, it starts over.

The texts are those ingestion embeds: ``entity_text(name, type, summary)`` for an entity, the
fact's text for a fact, the passage's text for a passage. Rows without a vector today get one
too (a passage whose embedding failed when its episode was accepted).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.embedding import Embedder
from workbench.errors import InvalidInput
from workbench.ingest.records import entity_text
from workbench.store import Store
from workbench.store import graph as g
from workbench.store import reembed as sql

BATCH = 512


@dataclass
class ReembedReport:
    entities: int
    facts: int
    passages: int
    model_before: str | None
    model_after: str
    dimensions_before: int
    dimensions_after: int
    seconds: float
    database: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


Progress = Callable[[int], None]


def reembed(store: Store, embedder: Embedder, progress: Progress | None = None) -> ReembedReport:
    """Embed every entity, fact and passage of ``store`` with ``embedder`` and make it the
    database's model (see the module docstring). ``progress(n)`` is told of each batch's rows."""
    if store.read_only:
        raise InvalidInput("the database is open read-only: re-embedding writes every vector")
    started = time.perf_counter()
    before_dim, before_model = store.dim, store.meta("embedding_model") or None
    dim = int(embedder.dimensions)
    counts = {}
    for kind in sql.KINDS:
        staging = sql.stage(store, kind, dim)
        rows = sql.sources(store, kind)
        counts[kind] = len(rows)
        for start in range(0, len(rows), BATCH):
            batch = rows[start : start + BATCH]
            texts = [entity_text(*r[1:]) if kind == "entity" else r[1] for r in batch]
            vectors = embedder.embed(texts)
            if vectors.shape != (len(batch), dim):
                raise InvalidInput(
                    f"the embedder returned vectors of shape {vectors.shape} for {len(batch)} "
                    f"texts; {dim} dimensions were expected"
                )
            g.insert_vectors(store, staging, [r[0] for r in batch], vectors, embedder.model)
            if progress is not None:
                progress(len(batch))
    sql.swap_in(store, dim, embedder.model)
    store.dim = dim
    store.checkpoint()
    _drop_saved_indexes(store)
    return ReembedReport(
        counts["entity"],
        counts["fact"],
        counts["passage"],
        before_model,
        embedder.model,
        before_dim,
        dim,
        round(time.perf_counter() - started, 2),
        store.path,
    )


def copy_database(source: str | Path, target: str | Path) -> Path:
    """A copy of a closed, checkpointed database file at ``target`` (refused when it exists)."""
    source, target = Path(source).expanduser(), Path(target).expanduser()
    if target.exists():
        raise InvalidInput(f"{target} exists already; name a new file for the re-embedded copy")
    if not source.is_file():
        raise InvalidInput(f"database file not found: {source}")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    return target


def _drop_saved_indexes(store: Store) -> None:
    """The saved vector graphs beside the file describe the old vectors: remove them (the
    search engine would find their checksum wrong and rebuild anyway)."""
    beside = store.beside_file(".search")
    if beside is not None:
        shutil.rmtree(beside, ignore_errors=True)
