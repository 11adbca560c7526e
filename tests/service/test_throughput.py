"""The service under concurrent searches: their queries are embedded together, and ``/health``
has a thread of its own, so a probe is answered while every tool thread is busy."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
from litestar.concurrency import get_asyncio_executor, set_asyncio_executor

from service.api.app import create_app
from service.control.runner import TOOL_THREADS, tool_threads
from tests.service.svc_helpers import make_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics

SEARCHES = TOOL_THREADS + 4  # every tool thread busy, and more waiting for one


class HeldQueries(HashEmbedder):
    """Embeds stored text at once; every query waits until :attr:`gate` opens."""

    def __init__(self):
        super().__init__()
        self.gate = threading.Event()
        self.query_calls: list[int] = []
        self.waiting = threading.Semaphore(0)

    def embed_queries(self, texts):
        self.query_calls.append(len(texts))
        self.waiting.release()
        assert self.gate.wait(30)
        return self.embed(texts)


def test_health_answers_while_every_tool_thread_waits_and_waiting_queries_share_a_call(
    server_thread,
):
    embedder = HeldQueries()
    wb = Workbench.open(make_settings(), embedder=embedder, chat=None, metrics=Metrics())
    try:
        facts = [{"type": "fact", "source": f"a{i}", "target": f"b{i}",
                  "fact": f"a{i} plays chess with b{i}", "group_id": "g"}
                 for i in range(20)]  # fmt: skip
        wb.import_memories(facts)
        tool_threads()  # what `workbench serve` runs them in
        srv = server_thread(create_app(wb, wb.settings))

        def search(i: int) -> httpx.Response:
            body = {"query": f"who plays chess with b{i}", "max_facts": 3}
            return httpx.post(f"{srv.url}/tools/search_memory_facts", json=body, timeout=60)

        with ThreadPoolExecutor(SEARCHES) as pool:
            futures = [pool.submit(search, i) for i in range(SEARCHES)]
            assert embedder.waiting.acquire(timeout=30)  # one query holds the model
            queued(
                wb.search.searcher.embedder, TOOL_THREADS - 1
            )  # the other tool threads wait for it
            health = httpx.get(f"{srv.url}/health", timeout=15)
            assert health.status_code == 200
            assert all(not f.done() for f in futures)  # answered while they all wait
            embedder.gate.set()
            answers = [f.result(60) for f in futures]
        assert [a.status_code for a in answers] == [200] * SEARCHES
        assert all(a.json()["facts"] for a in answers)
        assert len(embedder.query_calls) < SEARCHES  # the queued queries shared calls
        assert sum(embedder.query_calls) == SEARCHES
    finally:
        set_asyncio_executor(None)
        wb.close()


def queued(batcher, n: int) -> None:
    deadline = time.monotonic() + 30
    while len(batcher._queue) < n:
        assert time.monotonic() < deadline, f"{len(batcher._queue)} queries queued, not {n}"
        time.sleep(0.01)


def test_the_served_tools_get_their_own_threads():
    try:
        tool_threads()
        executor = get_asyncio_executor()
        assert executor is not None and executor._max_workers == TOOL_THREADS
    finally:
        set_asyncio_executor(None)
