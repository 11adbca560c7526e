"""The search engine's hot path: BM25 runs in a worker thread while the query is embedded."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.search.helpers import add, entity, fact
from workbench.errors import EmbedderError
from workbench.fakes.embedder import HashEmbedder


class WaitingEmbedder(HashEmbedder):
    """Embeds a query only once the keyword search has started (or fails after a timeout):
    a search that ran BM25 after the embedding, not meanwhile, would fail."""

    def __init__(self):
        super().__init__()
        self.keyword_started = threading.Event()
        self.waiting = False

    def embed(self, texts):
        if self.waiting and not self.keyword_started.wait(timeout=5):
            raise AssertionError("the keyword search did not run while the query was embedded")
        return super().embed(texts)


def corpus(engine):
    sam, tea = add(engine, "entity", [entity("Sam", "likes green tea"), entity("Green tea")])
    add(
        engine,
        "fact",
        [fact(f"Sam drinks green tea number {i}", sam, tea) for i in range(20)]
        + [fact("Sam moved to Lisbon in March", sam, sam)],
    )


def watch_keyword_search(engine, kind, embedder, monkeypatch):
    index = engine.indexes.keywords[kind]
    search = index.search

    def signalling(*args, **kwargs):
        embedder.keyword_started.set()
        return search(*args, **kwargs)

    monkeypatch.setattr(index, "search", signalling)


def ranking(hits):
    return [(h["uuid"], h["score_parts"]) for h in hits]


@pytest.mark.parametrize("kind", ["entity", "fact"])
def test_keyword_search_overlaps_the_query_embedding(make_engine, monkeypatch, kind):
    embedder = WaitingEmbedder()
    engine = make_engine(embedder, query_cache_size=0)
    corpus(engine)
    watch_keyword_search(engine, kind, embedder, monkeypatch)
    embedder.waiting = True
    search = engine.search_facts if kind == "fact" else engine.search_nodes
    hits = search("green tea Lisbon")
    assert hits and embedder.keyword_started.is_set()
    assert max(h["score_parts"]["keyword"] for h in hits) > 0


def test_threaded_and_inline_searches_rank_the_same(make_engine, hash_embedder):
    engine = make_engine(hash_embedder)
    corpus(engine)
    threaded = engine.search_facts("green tea in Lisbon", max_facts=15)
    cached = engine.search_facts("green tea in Lisbon", max_facts=15)  # query cached: inline
    assert ranking(cached) == ranking(threaded)
    engine.close()  # after close: no worker threads, still searchable inline
    assert engine.searcher._executor is None
    assert ranking(engine.search_facts("green tea in Lisbon", max_facts=15)) == ranking(threaded)


class FailingEmbedder(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.fail = False

    def embed(self, texts):
        if self.fail:
            raise EmbedderError("the embedder is down")
        return super().embed(texts)


def test_an_embedder_error_reaches_the_caller_and_the_next_search_works(make_engine):
    embedder = FailingEmbedder()
    engine = make_engine(embedder, query_cache_size=0)
    corpus(engine)
    embedder.fail = True
    for _ in range(3):  # more failures than workers: none keeps its worker slot
        with pytest.raises(EmbedderError, match="down"):
            engine.search_facts("green tea")
    embedder.fail = False
    assert engine.search_facts("green tea")
    assert free_workers(engine) == 2


def free_workers(engine, timeout: float = 5.0) -> int:
    """How many worker slots can be taken (waiting for BM25 tasks still finishing)."""
    deadline = time.monotonic() + timeout
    while True:
        taken = [engine.searcher._workers.acquire(blocking=False) for _ in range(2)]
        for ok in taken:
            if ok:
                engine.searcher._workers.release()
        if all(taken) or time.monotonic() > deadline:
            return sum(taken)
        time.sleep(0.01)


def test_keyword_search_runs_inline_when_the_workers_are_busy(make_engine, monkeypatch):
    engine = make_engine(HashEmbedder(), query_cache_size=0)
    corpus(engine)
    index = engine.indexes.keywords["fact"]
    search, threads = index.search, []

    def recording(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return search(*args, **kwargs)

    monkeypatch.setattr(index, "search", recording)
    expected = ranking(engine.search_facts("green tea Lisbon"))
    assert threads[-1].startswith("workbench-search")
    taken = [engine.searcher._workers.acquire(blocking=False) for _ in range(2)]
    assert all(taken)  # both workers busy (as with two other searches in flight)
    try:
        assert ranking(engine.search_facts("green tea Lisbon")) == expected
        assert threads[-1] == threading.current_thread().name
    finally:
        for _ in taken:
            engine.searcher._workers.release()
    engine.search_facts("green tea Lisbon")
    assert threads[-1].startswith("workbench-search")


def test_a_hit_only_the_vectors_found_gets_its_real_keyword_score(make_engine, hash_embedder):
    """BM25's top candidates are short texts repeating the query words; the answer, long and
    so lower in BM25, comes only from the vector index. Its keyword part must still be its
    BM25 score (it holds the query words), not 0."""
    engine = make_engine(hash_embedder, candidate_pool=1)
    query = "green tea"
    a, b = add(engine, "entity", [entity("Ana"), entity("Tea")])
    rng = np.random.default_rng(3)
    noise = rng.normal(size=(12, hash_embedder.dimensions)).astype(np.float32)
    noise /= np.linalg.norm(noise, axis=1, keepdims=True)
    short = [fact("green tea, green tea", a, b) for _ in range(12)]
    add(engine, "fact", short, noise)
    answer = fact(
        "Ana drinks green tea every morning before she walks the dog to the park "
        "near the old station and back home again",
        a,
        b,
    )
    add(engine, "fact", [answer], hash_embedder.embed([query]))
    by_keyword = [u for u, *_ in engine.indexes.keywords["fact"].search(query, 5)]
    assert answer["uuid"] not in by_keyword  # only the vectors bring it
    hit = engine.search_facts(query, max_facts=1)[0]
    assert hit["uuid"] == answer["uuid"]
    expected = engine.indexes.keywords["fact"].scores(query, [answer["uuid"]])[0]
    assert expected > 0
    assert hit["score_parts"]["keyword"] == pytest.approx(expected)


class QueryPrefixEmbedder(HashEmbedder):
    """A model with separate query and document embeddings (as E5's prefixes): a query is
    embedded as the words it names after a ``->`` (so it points elsewhere than its text)."""

    def __init__(self):
        super().__init__()
        self.queries: list[str] = []

    def embed_queries(self, texts):
        self.queries += list(texts)
        return super().embed([t.split("->")[-1] for t in texts])


@pytest.mark.parametrize("kind", ["entity", "fact"])
def test_a_search_embeds_its_query_as_a_query(make_engine, kind):
    embedder = QueryPrefixEmbedder()
    engine = make_engine(embedder, query_cache_size=0)
    corpus(engine)
    search = engine.search_facts if kind == "fact" else engine.search_nodes
    hits = search("green tea -> Lisbon", max_facts=25) if kind == "fact" else search("x -> tea")
    assert embedder.queries == ["green tea -> Lisbon" if kind == "fact" else "x -> tea"]
    if kind == "fact":  # the query's vector is Lisbon's, its words are green tea's
        closest = max(hits, key=lambda h: h["score_parts"]["similarity"])
        assert closest["fact"] == "Sam moved to Lisbon in March"


class CrowdedEmbedder(HashEmbedder):
    """A model whose unrelated texts have a cosine of about 0.5 (as E5's about 0.7)."""

    similarity_baseline = 0.5


def test_similarity_is_mapped_from_the_models_baseline(make_engine):
    plain = make_engine(HashEmbedder())
    corpus(plain)
    crowded = make_engine(CrowdedEmbedder())
    cosine = {h["uuid"]: h["score_parts"]["similarity"]
              for h in plain.search_facts("Sam moved to Lisbon", max_facts=25)}  # fmt: skip
    mapped = crowded.search_facts("Sam moved to Lisbon", max_facts=25)
    assert mapped and all(
        h["score_parts"]["similarity"] == pytest.approx((cosine[h["uuid"]] - 0.5) / 0.5, abs=1e-5)
        for h in mapped
    )
