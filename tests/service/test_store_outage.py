"""A PostgreSQL outage under a running ``workbench serve`` (a real process, on a PostgreSQL
cluster of its own that the test stops and starts): while the server is down, requests that
need it answer 503 ``store_unavailable`` at once, searches still answer from memory, ``/health``
answers at once and says the store is down; work resumes within seconds of its return, no
episode lost or done twice; and a service whose store is gone still stops promptly on SIGTERM,
its claimed episodes taken over by the next one."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import psycopg
import pytest

from tests.pg import ThrowawayPostgres, wait_for
from tests.service.svc_helpers import duplicate_counts
from tests.service.test_serve_subprocess import Service, env  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow

OUTAGE_SECONDS = 8
FAST = 1.5  # seconds: "at once", with room for a busy 2-core machine


@pytest.fixture
def pg():
    with ThrowawayPostgres() as server:
        yield server


def _episode(i: int) -> dict:
    return {
        "name": f"note {i}",
        "episode_body": f"Person{i % 7} works at Company{i % 5}. Note {i}.",
        "group_id": f"g{i % 10}",
    }


def timed(call):
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def _counts(url: str) -> dict[str, int]:
    with psycopg.connect(url) as con:
        rows = con.execute("SELECT status, count(*) FROM episodes GROUP BY status").fetchall()
        return dict(rows)


def _during_outage(service: Service) -> None:
    """Every kind of request while the store is down, several at once."""
    with ThreadPoolExecutor(8) as pool:
        adds = list(
            pool.map(
                lambda i: timed(lambda: service.http.post("/tools/add_memory", json=_episode(i))),
                range(1000, 1008),
            )
        )
    for response, seconds in adds:
        assert response.status_code == 503, response.text
        assert response.json()["error"]["type"] == "store_unavailable"
        assert response.headers["Retry-After"] == "1"  # one probe later
        assert "unreachable" in response.json()["error"]["message"]
        assert seconds < FAST, seconds
    health, seconds = timed(lambda: service.http.get("/health"))
    assert seconds < FAST and health.status_code == 503
    store = health.json()["checks"]["store"]
    assert store["ok"] is False and "unreachable" in store["detail"] and store["down_since"]
    search, seconds = timed(
        lambda: service.http.post(
            "/tools/search_memory_facts", json={"query": "who works at Company1"}
        )
    )
    assert search.status_code == 200 and seconds < FAST, (search.text, seconds)
    status, seconds = timed(lambda: service.http.post("/tools/get_queue_status", json={}))
    assert status.status_code == 503 and seconds < FAST


def test_an_outage_fails_fast_and_loses_nothing(env, pg, fake_llm, tmp_path):  # noqa: F811
    url = pg.create_database()
    shared = {
        **env,
        "SVC_KNOWLEDGE_DATABASE_URL": url,
        "SVC_KNOWLEDGE_QUEUE_LEASE_SECONDS": "4",
        "SVC_KNOWLEDGE_DECAY_ENABLED": "false",
    }
    fake_llm.latency = 0.2  # the outage lands while episodes are in flight
    service = Service(shared, tmp_path / "unused.duckdb", tmp_path / "a.log")
    try:
        service.wait_ready()
        for i in range(60):
            service.tool("add_memory", _episode(i))
        service.wait_done(5, timeout=60)
        pg.halt()
        outage_ends = time.monotonic() + OUTAGE_SECONDS
        _during_outage(service)
        while time.monotonic() < outage_ends - 0.5:  # searches keep answering throughout
            search, seconds = timed(
                lambda: service.http.post("/tools/search_memory_nodes", json={"query": "Person3"})
            )
            assert search.status_code == 200 and seconds < FAST, (search.text, seconds)
            time.sleep(0.4)
        time.sleep(max(0.0, outage_ends - time.monotonic()))
        pg.resume()
        back = time.monotonic()
        assert wait_for(lambda: service.http.get("/health").status_code == 200, 10, 0.1)
        assert time.monotonic() - back < 5
        service.wait_done(60, timeout=90)
        assert _counts(url) == {"done": 60}  # the refused adds left nothing behind
        with psycopg.connect(url) as con:
            assert duplicate_counts(con) == (0, 0)

        # stopped while the store is gone: it exits promptly, and the next process takes
        # over what it held once the leases run out
        for i in range(60, 80):
            service.tool("add_memory", _episode(i))
        time.sleep(0.5)
        pg.halt()
        wait_for(lambda: service.http.get("/health").status_code == 503, 5, 0.1)
        code, seconds = timed(lambda: service.stop(signal.SIGTERM, timeout=120))
        assert seconds < 20 and code == 0, service.log.read_text()[-3000:]
        pg.resume()
        service = Service(shared, tmp_path / "unused.duckdb", tmp_path / "b.log")
        service.wait_ready()
        service.wait_done(80, timeout=120)
        assert _counts(url) == {"done": 80}
        with psycopg.connect(url) as con:
            assert duplicate_counts(con) == (0, 0)
    finally:
        if service.proc.poll() is None:
            service.stop()


def test_health_answers_while_requests_wait_on_the_store(env, pg, tmp_path):  # noqa: F811
    """Many requests at once against a store that is down do not starve ``/health``."""
    url = pg.create_database()
    shared = {**env, "SVC_KNOWLEDGE_DATABASE_URL": url, "SVC_KNOWLEDGE_DECAY_ENABLED": "false"}
    service = Service(shared, tmp_path / "unused.duckdb", tmp_path / "a.log")
    try:
        service.wait_ready()
        pg.halt()
        stop = threading.Event()

        def hammer() -> None:
            with httpx.Client(base_url=service.http.base_url, timeout=30) as client:
                while not stop.is_set():
                    client.post("/tools/get_episodes", json={})

        threads = [threading.Thread(target=hammer) for _ in range(30)]
        for t in threads:
            t.start()
        try:
            for _ in range(5):
                health, seconds = timed(lambda: service.http.get("/health"))
                assert health.status_code == 503 and seconds < FAST, seconds
                time.sleep(0.2)
        finally:
            stop.set()
            for t in threads:
                t.join(30)
        pg.resume()
        assert wait_for(lambda: service.http.get("/health").status_code == 200, 10, 0.1)
    finally:
        if service.proc.poll() is None:
            service.stop()
