"""Search score: pure functions over values (the rules in ``docs/decay.md``).

``score = w_similarity * similarity + w_keyword * keyword
        + w_freshness * freshness + w_importance * importance``

* ``similarity`` — the real cosine between the query and the memory embedding (never a rank
  proxy); 0 when the memory has no embedding.
* ``keyword`` — the BM25 score normalised by the idf mass of the query (0..1, see
  :meth:`workbench.search.bm25.KeywordIndex.search`); 0 when no query word occurs.
* ``freshness`` — ``1 - decay_score``.
* ``importance`` — ``(importance - 1) / 4`` (1 -> 0, 3 -> 0.5, 5 -> 1).

Fusion: candidates are the union of the vector top-N and the BM25 top-N; they are ordered by
this weighted sum of the *normalised scores* rather than by reciprocal rank, which lost to
vectors alone at the top ranks on our conversational retrieval set
(``python -m workbench.eval.retrieval --tune``; figures in ``docs/decay.md``, "How decay
enters search"). The
keyword weight is added on top of the similarity / freshness / importance weights
(0.60 / 0.25 / 0.15), so those keep their meaning.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["Weights", "freshness", "importance_score", "rrf", "score_arrays"]

# Tuned on data/retrieval_set.jsonl (workbench.eval.retrieval); see the module docstring.
DEFAULT_KEYWORD_WEIGHT = 0.3


def keyword_weight_for(embedder) -> float:
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
    def from_settings(cls, settings, keyword: float = DEFAULT_KEYWORD_WEIGHT) -> Weights:
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


def rrf(rankings: list[list[str]], k: int = 60, weights: list[float] | None = None) -> list[str]:
    """Reciprocal-rank fusion (for comparison in the evaluation only)."""
    weights = weights or [1.0] * len(rankings)
    scores: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for rank, uuid in enumerate(ranking):
            scores[uuid] = scores.get(uuid, 0.0) + w / (k + rank + 1)
    return sorted(scores, key=lambda u: -scores[u])
