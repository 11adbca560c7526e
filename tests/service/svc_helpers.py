"""Helpers of the service tests: free ports and real uvicorn servers in threads on loopback."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Self

import uvicorn

from workbench.config import load_settings
from workbench.fakes.chat_server import chat_settings_env

BASE = "http://127.0.0.1:8000"


def environ_without_settings(**env: str) -> dict[str, str]:
    """This process's environment without any workbench setting, plus ``env`` (for a
    subprocess that must see only the test's settings)."""
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SVC_KNOWLEDGE_") and k != "LOG_LEVEL"
    }
    return {**clean, **env}


DUPLICATES_SQL = (
    # facts written twice (the same current text between the same ends in a group)
    "SELECT count(*) FROM (SELECT group_id, source_uuid, target_uuid, lower(fact) FROM facts "
    "WHERE expired_at IS NULL GROUP BY 1, 2, 3, 4 HAVING count(*) > 1) AS d",
    # entities written twice (the same name in a group)
    "SELECT count(*) FROM (SELECT group_id, name_norm FROM entities GROUP BY 1, 2 "
    "HAVING count(*) > 1) AS d",
)


def duplicate_counts(con) -> tuple[int, int]:
    """(facts, entities) written twice, through a DuckDB or a psycopg connection."""
    facts, entities = (con.execute(sql).fetchone()[0] for sql in DUPLICATES_SQL)
    return facts, entities


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """A real uvicorn server for an ASGI app, in a thread, on a free loopback port."""

    def __init__(self, app, port: int | None = None):
        self.port = port or free_port()
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_config=None, lifespan="on", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the test server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


class Tick:
    """A rate-limit clock that only moves when told to."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_settings(fake_llm=None, **env):
    base = chat_settings_env(fake_llm) if fake_llm else {}
    base.update({"SVC_KNOWLEDGE_DB_PATH": ":memory:", **env})
    return load_settings(base, env_file=None)


def call(client, tool: str, body: dict | None = None, status: int = 200, **kw):
    response = (
        client.post(f"/tools/{tool}", json=body, **kw)
        if body is not None
        else client.post(f"/tools/{tool}", **kw)
    )
    assert response.status_code == status, response.text
    return response.json()


def assert_error(body: dict, kind: str, fragment: str = "") -> None:
    assert set(body) == {"error"}
    error = body["error"]
    assert error["type"] == kind
    assert fragment in error["message"]
    assert "Traceback" not in error["message"] and error["request_id"]
