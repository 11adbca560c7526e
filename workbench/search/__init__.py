"""Answering searches over memories, with no LLM call: the engine (:class:`SearchEngine`), the
searcher over the live indexes (:mod:`workbench.index`), the query and its filters, the score
and its rules, the link between facts, ``search_memory`` and the hit shape."""

from workbench.search.engine import SearchEngine

__all__ = ["SearchEngine"]
