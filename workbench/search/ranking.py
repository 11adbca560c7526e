"""Search score: pure functions over values (the rules in ``docs/decay.md``).

``score = w_similarity * similarity + w_keyword * keyword
        + w_freshness * freshness + w_importance * importance``

* ``similarity`` — the real cosine between the query and the memory embedding (never a rank
  proxy); 0 when the memory has no embedding.
* ``keyword`` — the BM25 score normalised by the idf mass of the query (0..1, see
  :meth:`workbench.index.keyword.bm25.KeywordIndex.search`); 0 when no query word occurs.
* ``freshness`` — ``1 - decay_score``.
* ``importance`` — ``(importance - 1) / 4`` (1 -> 0, 3 -> 0.5, 5 -> 1).

Fusion: candidates are the union of the vector top-N and the BM25 top-N; they are ordered by
this weighted sum of the *normalised scores* rather than by reciprocal rank, which lost to
vectors alone at the top ranks on our conversational retrieval set
(``python -m workbench.eval.retrieval --tune``; figures in ``docs/decay.md``, "How decay
enters search"). The
keyword weight is added on top of the similarity / freshness / importance weights
(0.60 / 0.25 / 0.15), so those keep their meaning.

Around the score, also pure and here: the similarity's calibration to the model's own scale
(:func:`calibrated`), the similarity floor (:func:`relevant`), the facts a followed link
brings ranked right after it (:func:`after_link`), the centre-node tiers (:func:`tier`) and
the final order (:func:`best`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from workbench.config import Settings

__all__ = [
    "DEFAULT_FLOOR",
    "LINKED_RANKED",
    "RECENCY_WEIGHT",
    "TIME_WEIGHT",
    "TimeBoost",
    "Weights",
    "after_link",
    "best",
    "boosted",
    "calibrated",
    "freshness",
    "importance_score",
    "relevant",
    "recency_score",
    "rrf",
    "score_arrays",
    "tier",
    "time_parts",
    "window_score",
]

# Tuned on data/retrieval_set.jsonl (workbench.eval.retrieval); see the module docstring.
DEFAULT_KEYWORD_WEIGHT = 0.3
# the default of SVC_KNOWLEDGE_SEARCH_MIN_SIMILARITY (see the settings' table)
DEFAULT_FLOOR = 0.0
LINKED_RANKED = 2  # facts of a linked entity ranked right after the link


def keyword_weight_for(embedder: object) -> float:
    """The keyword weight that ranks best with ``embedder``: its ``keyword_weight`` when it
    has one (multilingual-e5-small's, tuned on the development set), else the default."""
    return float(getattr(embedder, "keyword_weight", DEFAULT_KEYWORD_WEIGHT))


@dataclass(frozen=True)
class Weights:
    similarity: float = 0.60
    freshness: float = 0.25
    importance: float = 0.15
    keyword: float = DEFAULT_KEYWORD_WEIGHT

    @classmethod
    def from_settings(cls, settings: Settings, keyword: float = DEFAULT_KEYWORD_WEIGHT) -> Weights:
        """The settings' weights; ``keyword`` where they leave the keyword weight unset (the
        embedder's own: :func:`keyword_weight_for`)."""
        configured = getattr(settings, "search_weight_keyword", None)
        return cls(
            similarity=settings.search_weight_similarity,
            freshness=settings.search_weight_freshness,
            importance=settings.search_weight_importance,
            keyword=keyword if configured is None else configured,
        )

    def relevance_only(self) -> Weights:
        """The weights without freshness and importance (``include_weighted_scores=False``)."""
        return Weights(self.similarity, 0.0, 0.0, self.keyword)

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _clip(value: float, low: float = 0.0, high: float = 1.0) -> float:
    return min(high, max(low, value))


def freshness(decay_score: float | None) -> float:
    return 1.0 - _clip(float(decay_score or 0.0))


def importance_score(importance: int | float | None) -> float:
    return (_clip(float(importance if importance is not None else 3), 1.0, 5.0) - 1.0) / 4.0


def score_arrays(
    similarity: np.ndarray,
    keyword: np.ndarray,
    decay: np.ndarray,
    importance: np.ndarray,
    weights: Weights,
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The score and its parts (similarity, keyword, freshness, importance), one entry per
    candidate."""
    parts = {
        "similarity": np.nan_to_num(similarity.astype(np.float64), nan=0.0),
        "keyword": np.clip(np.nan_to_num(keyword.astype(np.float64), nan=0.0), 0.0, 1.0),
        "freshness": 1.0 - np.clip(decay.astype(np.float64), 0.0, 1.0),
        "importance": (np.clip(importance.astype(np.float64), 1.0, 5.0) - 1.0) / 4.0,
    }
    parts = {name: np.round(values, 6) for name, values in parts.items()}
    score = (
        weights.similarity * parts["similarity"]
        + weights.keyword * parts["keyword"]
        + weights.freshness * parts["freshness"]
        + weights.importance * parts["importance"]
    )
    return score, parts


# Tuned on LongMemEval's temporal-reasoning and knowledge-update questions
# (bench/bench_longmemeval.py; figures in docs/performance.md): the boost of a memory inside
# the window a query names, and of the newer memories for a question about the present.
TIME_WEIGHT = 0.2
RECENCY_WEIGHT = 0.1


@dataclass(frozen=True)
class TimeBoost:
    """What a query's time words ask of the ranking: the window it names (microseconds since
    the epoch, ``[start, end)``; None: none) and whether it asks about the present."""

    window: tuple[int, int] | None = None
    recent: bool = False
    window_weight: float = TIME_WEIGHT
    recency_weight: float = RECENCY_WEIGHT

    def __bool__(self) -> bool:
        return self.window is not None or self.recent


def window_score(when: np.ndarray, start: int, end: int) -> np.ndarray:
    """1 for a memory about a time inside ``[start, end)``, falling linearly to 0 at one
    window length outside it (questions name times loosely); 0 for no time (``when`` holds
    microseconds; the minimum int64 is no time)."""
    unknown = when == np.iinfo(np.int64).min
    at = when.astype(np.float64)
    length = max(float(end - start), 1.0)
    outside = np.maximum(start - at, at - (end - 1)).clip(min=0.0)
    score: np.ndarray = np.clip(1.0 - outside / length, 0.0, 1.0)
    score[unknown] = 0.0
    return np.round(score, 6)


def recency_score(when: np.ndarray) -> np.ndarray:
    """How new each memory is among these candidates: 0 for the oldest, 1 for the newest,
    linear in time between (all 0 when they share one time)."""
    if not len(when):
        return np.zeros(0)
    low, high = float(when.min()), float(when.max())
    if high <= low:
        return np.zeros(len(when))
    return np.round((when.astype(np.float64) - low) / (high - low), 6)


def time_parts(when: np.ndarray, boost: TimeBoost) -> dict[str, np.ndarray]:
    """The score parts a :class:`TimeBoost` adds (``time``, ``recency``), for the memories
    about times ``when`` (microseconds)."""
    parts = {}
    if boost.window is not None:
        parts["time"] = window_score(when, *boost.window)
    if boost.recent:
        parts["recency"] = recency_score(when)
    return parts


def boosted(score: np.ndarray, parts: dict[str, np.ndarray], boost: TimeBoost) -> np.ndarray:
    """``score`` with the weighted time parts added."""
    if "time" in parts:
        score = score + boost.window_weight * parts["time"]
    if "recency" in parts:
        score = score + boost.recency_weight * parts["recency"]
    return score


def calibrated(cosine: np.ndarray, baseline: float) -> np.ndarray:
    """Cosine mapped onto the model's own scale: ``(cosine - b) / (1 - b)`` where ``b`` is the
    embedder's ``similarity_baseline``, the cosine of unrelated texts (0 for MiniLM; E5's
    cosines crowd into 0.7-1), so that similarity weighs against the keyword score, the floor
    and ``min_score`` alike whatever the model."""
    return cosine if not baseline else (cosine - baseline) / (1.0 - baseline)


def relevant(similarity: np.ndarray, keyword: np.ndarray, floor: float) -> np.ndarray:
    """The similarity floor: which candidates count (a calibrated similarity of at least
    ``floor``, or any keyword match); one less similar that shares no word is noise."""
    result: np.ndarray = (similarity >= floor) | (keyword > 0)
    return result


def after_link(
    uuids: Sequence[str], scores: np.ndarray, link: str, linked: Collection[str]
) -> np.ndarray:
    """The best :data:`LINKED_RANKED` ``linked`` facts rank right after the ``link`` fact (a
    copy of ``scores``; ``scores`` itself when the link is not among ``uuids``)."""
    at = next((i for i, u in enumerate(uuids) if u == link), None)
    if at is None:
        return scores
    scores = scores.copy()
    chosen = sorted((i for i, u in enumerate(uuids) if u in linked),
                    key=lambda i: -scores[i])[:LINKED_RANKED]  # fmt: skip
    for rank, i in enumerate(chosen):
        scores[i] = max(scores[i], scores[at] - 1e-4 * (rank + 1))
    return scores


def tier(ends: tuple[str, str], centre: str, neighbours: Collection[str]) -> int:
    """A fact's centre-node tier: 0 when it touches the ``centre`` entity, 1 when it touches
    one of its 1-hop ``neighbours``, else 2."""
    if centre in ends:
        return 0
    return 1 if ends[0] in neighbours or ends[1] in neighbours else 2


def best(
    uuids: Sequence[str],
    scores: np.ndarray,
    tiers: np.ndarray,
    k: int,
    min_score: float | None = None,
) -> np.ndarray:
    """The positions of the best ``k``: by tier, then score (highest first), then uuid; those
    scoring below ``min_score`` left out."""
    chosen = np.arange(len(uuids))
    if min_score is not None:
        chosen = chosen[scores >= min_score]
    ids = np.array(uuids)[chosen]
    order: np.ndarray = chosen[np.lexsort((ids, -scores[chosen], tiers[chosen]))][:k]
    return order


def rrf(rankings: list[list[str]], k: int = 60, weights: list[float] | None = None) -> list[str]:
    """Reciprocal-rank fusion (for comparison in the evaluation only)."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, uuid in enumerate(ranking):
            scores[uuid] = scores.get(uuid, 0.0) + w / (k + rank + 1)
    return sorted(scores, key=lambda u: -scores[u])
