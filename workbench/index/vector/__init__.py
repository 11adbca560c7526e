"""The vector index of one memory kind (:class:`~workbench.index.vector.index.VectorIndex`) and
the parts it holds: its slots (``slots``), the HNSW graph's build (``graph``), its searches
(``search``) and saves (``saves``); ``file_rows`` reads saved rows with ``pread``."""

from workbench.index.vector.index import KINDS, Allowed, VectorIndex, load_index

__all__ = ["KINDS", "Allowed", "VectorIndex", "load_index"]
