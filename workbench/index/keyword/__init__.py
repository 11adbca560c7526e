"""The BM25 keyword index of one memory kind (:class:`~workbench.index.keyword.bm25.KeywordIndex`)
and what it holds: its documents and postings (``documents``), over the tokens of ``tokens``."""

from workbench.index.keyword.bm25 import KeywordIndex

__all__ = ["KeywordIndex"]
