"""The SQL of re-embedding a database with another model (``workbench reembed``): the texts
to embed, staging tables for the new vectors, and the swap that makes them the database's."""

from __future__ import annotations

from workbench.store.base import Row, Store
from workbench.store.schema import embeddings_table

__all__ = ["KINDS", "memory_count", "sources", "stage", "swap_in"]

# what is embedded, per kind: uuid first, then the texts (an entity's name, type and summary)
_SOURCES = {
    "entity": "SELECT uuid, name, entity_type, summary FROM entities ORDER BY uuid",
    "fact": "SELECT uuid, fact FROM facts ORDER BY uuid",
    "passage": "SELECT uuid, text FROM passages ORDER BY uuid",
}
KINDS = tuple(_SOURCES)


def memory_count(store: Store) -> int:
    """How many entities, facts and passages the database holds (the vectors to write)."""
    row = store.fetchone(
        "SELECT (SELECT count(*) FROM entities) + (SELECT count(*) FROM facts) "
        "+ (SELECT count(*) FROM passages)"
    )
    return int(row[0]) if row else 0


def sources(store: Store, kind: str) -> list[Row]:
    """Every ``kind`` (one of :data:`KINDS`) as ``(uuid, text…)`` rows, in uuid order."""
    return store.fetchall(_SOURCES[kind])


def stage(store: Store, kind: str, dim: int) -> str:
    """A new, empty staging table for ``kind``'s vectors of ``dim`` (one left by a run that
    stopped half-way is dropped); its name."""
    staging = f"_reembed_{kind}"
    store.execute(f"DROP TABLE IF EXISTS {staging}")
    store.execute(embeddings_table(staging, dim))
    return staging


def swap_in(store: Store, dim: int, model: str) -> None:
    """In one transaction: the staging tables replace the embedding tables, and the database
    names ``dim`` and ``model`` as its vectors' size and model."""
    with store.transaction():
        for kind in KINDS:
            store.execute(f"DROP TABLE {kind}_embeddings")
            store.execute(f"ALTER TABLE _reembed_{kind} RENAME TO {kind}_embeddings")
        store.tables_replaced(dim)  # what a backend attaches to tables (PostgreSQL: triggers)
        store.set_meta("embedding_dim", str(dim))
        store.set_meta("embedding_model", model)
