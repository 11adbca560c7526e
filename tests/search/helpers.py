"""Write memories straight into the store with SQL (as ingestion would) and index them."""

from __future__ import annotations

import uuid as uuidlib
from datetime import UTC, datetime

import numpy as np

from workbench.store import Store
from workbench.store import graph as g

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def write_embeddings(store: Store, kind: str, uuids: list[str], vectors: np.ndarray) -> None:
    g.insert_vectors(store, f"{kind}_embeddings", uuids, vectors, "test", store.dim)


def entity(name: str, summary: str = "", group_id: str = "main", **memory) -> dict:
    row = {
        "uuid": memory.pop("uuid", None) or str(uuidlib.uuid4()),
        "group_id": group_id,
        "name": name,
        "entity_type": memory.pop("entity_type", "Entity"),
        "summary": summary,
        "created_at": memory.pop("created_at", T0),
        "importance": 3,
        "stability": 3,
        "decay_score": 0.0,
        "lifecycle_state": "ACTIVE",
        "last_accessed_at": None,
        "access_count": 0,
    }
    row.update(memory)
    return row


def fact(
    text: str,
    source: dict,
    target: dict,
    relation: str = "RELATES_TO",
    group_id: str = "main",
    **memory,
) -> dict:
    row = {
        "uuid": memory.pop("uuid", None) or str(uuidlib.uuid4()),
        "group_id": group_id,
        "source_uuid": source["uuid"],
        "target_uuid": target["uuid"],
        "relation": relation,
        "fact": text,
        "created_at": memory.pop("created_at", T0),
        "valid_at": None,
        "invalid_at": None,
        "expired_at": None,
        "importance": 3,
        "stability": 3,
        "decay_score": 0.0,
        "lifecycle_state": "ACTIVE",
        "last_accessed_at": None,
        "access_count": 0,
    }
    row.update(memory)
    return row


_ENTITY_COLS = (
    "uuid",
    "group_id",
    "name",
    "entity_type",
    "summary",
    "created_at",
    "importance",
    "stability",
    "decay_score",
    "lifecycle_state",
    "last_accessed_at",
    "access_count",
)
_FACT_COLS = (
    "uuid",
    "group_id",
    "source_uuid",
    "target_uuid",
    "relation",
    "fact",
    "created_at",
    "valid_at",
    "invalid_at",
    "expired_at",
    "importance",
    "stability",
    "decay_score",
    "lifecycle_state",
    "last_accessed_at",
    "access_count",
)


def insert(store: Store, kind: str, rows: list[dict], vectors: np.ndarray) -> None:
    """Write memory rows and their embeddings (one transaction), like ingestion does."""
    if kind == "entity":
        cols = ", ".join(_ENTITY_COLS)
        sql = (
            f"INSERT INTO entities ({cols}, name_norm, updated_at) VALUES "
            f"({', '.join('?' * len(_ENTITY_COLS))}, lower(?), ?)"
        )
        params = [[r[c] for c in _ENTITY_COLS] + [r["name"], r["created_at"]] for r in rows]
    else:
        cols = ", ".join(_FACT_COLS)
        sql = f"INSERT INTO facts ({cols}) VALUES ({', '.join('?' * len(_FACT_COLS))})"
        params = [[r[c] for c in _FACT_COLS] for r in rows]
    with store.transaction():
        store.executemany(sql, params)
        write_embeddings(store, kind, [r["uuid"] for r in rows], vectors)


def add(engine, kind: str, rows: list[dict], vectors: np.ndarray | None = None) -> list[dict]:
    """Insert rows (embedding their text with the engine's embedder unless given) and tell
    the engine, as the ingestion code does."""
    if vectors is None:
        texts = [r["fact"] if kind == "fact" else f"{r['name']}: {r['summary']}" for r in rows]
        vectors = engine.searcher.embedder.embed(texts)
    insert(engine.store, kind, rows, vectors)
    engine.indexes.on_upsert(kind, rows, vectors)
    return rows
