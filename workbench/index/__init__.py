"""The live search indexes, kept in step with the store: per memory kind the rows
(:mod:`~workbench.index.rows`), the BM25 keyword index (:mod:`~workbench.index.keyword`) and
the vector index (:mod:`~workbench.index.vector`, its HNSW graph built in the background), opened
and caught up at start, told of every write (:mod:`~workbench.index.publish`), synced with other
processes' writes through the change log (:mod:`~workbench.index.sync`), saved beside the
database (:mod:`~workbench.index.saves`); :class:`~workbench.index.live.LiveIndexes` holds them.
Answering queries over them is :mod:`workbench.search`'s job."""

from workbench.index.live import LiveIndexes
from workbench.index.publish import Publisher

__all__ = ["LiveIndexes", "Publisher"]
