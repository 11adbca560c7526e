"""The JSON-able shape of search hits (datetimes as ISO 8601 strings)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from workbench.index.rows import RowCache
from workbench.search.ranking import Weights

__all__ = ["node_out", "fact_out", "passage_out"]

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
