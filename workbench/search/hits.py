"""The JSON-able shape of search hits (datetimes as ISO 8601 strings)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from workbench.index.rows import RowCache
from workbench.search.ranking import Weights

__all__ = ["node_out", "fact_out", "passage_out", "successor"]

Row = dict[str, Any]  # a memory's row (:meth:`RowCache.get`)
Parts = dict[str, float]  # the parts of its score


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


_WEIGHTS: dict[Weights, dict[str, float]] = {}


def _weights(weights: Weights) -> dict[str, float]:
    cached = _WEIGHTS.get(weights)
    if cached is None:
        cached = _WEIGHTS[weights] = weights.as_dict()
        if len(_WEIGHTS) > 64:
            _WEIGHTS.clear()
    return dict(cached)


def _memory(row: Row, parts: Parts, score: float, weights: Weights) -> dict[str, Any]:
    return {
        "group_id": row["group_id"],
        "created_at": _iso(row["created_at"]),
        "lifecycle_state": row["lifecycle_state"],
        "importance": int(row["importance"]),
        "stability": int(row["stability"]),
        "decay_score": float(row["decay_score"]),
        "last_accessed_at": _iso(row["last_accessed_at"]),
        "access_count": int(row["access_count"]),
        "score": round(float(score), 6),
        "score_parts": parts,
        "score_weights": _weights(weights),
    }


def node_out(row: Row, parts: Parts, score: float, weights: Weights) -> dict[str, Any]:
    """An entity hit. ``decay_score`` is the value the score used (before this access);
    ``lifecycle_state``, ``last_accessed_at`` and ``access_count`` are after it."""
    return {
        "uuid": row["uuid"],
        "name": row["name"],
        "entity_type": row["entity_type"],
        "summary": row["summary"],
        **_memory(row, parts, score, weights),
    }


def fact_out(
    row: Row,
    parts: Parts,
    score: float,
    distance: int | None,
    weights: Weights,
    entities: RowCache,
) -> dict[str, Any]:
    """A fact hit with its endpoint names (looked up in the entity row cache)."""
    source = entities.value(row["source_uuid"], "name")
    target = entities.value(row["target_uuid"], "name")
    out = {
        "uuid": row["uuid"],
        "fact": row["fact"],
        "relation": row["relation"],
        "source_node_uuid": row["source_uuid"],
        "source_node_name": source,
        "target_node_uuid": row["target_uuid"],
        "target_node_name": target,
        "episode_uuid": row["episode_uuid"],
        "valid_at": _iso(row["valid_at"]),
        "invalid_at": _iso(row["invalid_at"]),
        "expired_at": _iso(row["expired_at"]),
        **_memory(row, parts, score, weights),
    }
    if distance is not None:
        out["graph_distance"] = distance
    return out


def passage_out(row: Row, parts: Parts, score: float, weights: Weights) -> dict[str, Any]:
    """A passage hit: what was said, with the episode it was said in."""
    return {
        "kind": "passage",
        "uuid": row["uuid"],
        "text": row["text"],
        "episode_uuid": row["episode_uuid"],
        "episode_name": row["episode_name"],
        "speaker": row["speaker"],
        "position": int(row["position"]),
        "reference_time": _iso(row["reference_time"]),
        **_memory(row, parts, score, weights),
    }


def successor(facts: RowCache, row: Row) -> str | None:
    """The fact that replaced a superseded fact, when it can be told (None for a current
    fact). The store keeps when a fact ended (``invalid_at``, ``expired_at``), not what
    ended it, so it is read from the graph: among the facts sharing an end with it (those of
    the same relation first), one stated no earlier than it whose validity starts where its
    own ended; failing that, the last one stated before it expired."""
    ended, expired = row.get("invalid_at"), row.get("expired_at")
    if ended is None and expired is None:
        return None
    ends = (row["source_uuid"], row["target_uuid"])
    near = {u for end in ends for u in facts.touching_of(end)} - {row["uuid"]}
    found: list[tuple[int, int, float, str]] = []
    for uuid in near:
        other = facts.get(uuid)
        if other is None or other["created_at"] < row["created_at"]:
            continue
        starts = other["valid_at"] or other["created_at"]
        if ended is not None and starts == ended:
            rank = 0
        elif expired is not None and other["created_at"] <= expired:
            rank = 1
        else:
            continue
        same = 0 if other["relation"] == row["relation"] else 1
        found.append((same, rank, -other["created_at"].timestamp(), uuid))
    return min(found)[3] if found else None
