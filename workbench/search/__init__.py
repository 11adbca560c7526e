"""Search over memories, with no LLM call: the engine (:class:`SearchEngine`), its vector and
BM25 indexes, the in-memory rows they rank, the score, the filters, the hit shape and the
access tracking that every search hit goes through."""

from workbench.search.engine import SearchEngine

__all__ = ["SearchEngine"]
