"""Every error kind the service can answer reads the same over REST, HTTP MCP and stdio MCP
(``workbench mcp`` forwarding to the service that holds the database): the same ``type``, the
same message, and the same ``Retry-After`` (a header over REST, ``retry_after`` over MCP).

The kinds are walked from the error tree itself (:func:`service.client.relayed.error_kinds`),
so a kind added later is covered without touching this file; the kinds only the HTTP layer
answers (``unauthorized``, ``rate_limited``) are walked over a service that answers them."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from pydantic import SecretStr

from service.api.app import create_app
from service.api.mcp_server import call_tool
from service.client.live import LiveService, RemoteWorkbench, write_record
from service.client.relayed import RelayedError, error_kinds
from tests.service.svc_helpers import environ_without_settings, make_settings
from workbench import errors
from workbench.fakes.embedder import HashEmbedder

REPO = Path(__file__).resolve().parents[2]
TOOL = "get_status"


def example(cls: type[errors.WorkbenchError]) -> errors.WorkbenchError:
    """An instance of ``cls`` with a message naming its kind."""
    message = f"the {cls.kind} condition happened: do what it says"
    if issubclass(cls, errors.StructuredOutputError):
        return cls("ExtractedEntities", message)
    return cls(message)


class Raising:
    """A tool target whose ``get_status`` raises the next error of ``pending``."""

    def __init__(self, settings):
        self.settings = settings
        self.embedder = HashEmbedder()  # for /health, which this test does not call
        self.pending: list[Exception] = []

    def get_status(self) -> dict:
        raise self.pending.pop(0)


def expected(exc: errors.WorkbenchError) -> tuple[str, str, int | None]:
    retry = exc.retry_after
    message = exc.message
    if exc.http_status == 500:
        message = "internal error; see the server log for request id"
    return exc.kind, message, max(1, retry) if retry is not None else None


def normal(kind: str, message: str, retry: int | None) -> tuple[str, str, int | None]:
    """A 500's message names the request id it was logged under: compared without it."""
    return kind, re.sub(r" \S+$", "", message) if "request id" in message else message, retry


def rest(url: str, headers: dict | None = None) -> tuple[str, str, int | None]:
    import httpx

    response = httpx.post(f"{url}/tools/{TOOL}", json={}, headers=headers or {})
    assert response.status_code != 200
    error = response.json()["error"]
    retry = response.headers.get("retry-after")
    return normal(error["type"], error["message"], int(retry) if retry else None)


def from_mcp(result) -> tuple[str, str, int | None]:
    assert result.is_error, result
    error = result.structured_content["error"]
    return normal(error["type"], error["message"], error.get("retry_after"))


KINDS = sorted(error_kinds().items())


def test_the_walk_covers_the_whole_tree():
    kinds = dict(KINDS)
    for name in ("queue_full", "forbidden", "store_unavailable", "llm_error", "disk_full"):
        assert name in kinds
    assert len(kinds) >= 20  # every class of workbench/errors.py has its own kind


@pytest.mark.anyio
async def test_every_kind_reads_the_same_over_rest_http_mcp_and_stdio(tmp_path, server_thread):
    settings = make_settings()
    target = Raising(settings)
    url = server_thread(create_app(target, settings)).url
    remote = RemoteWorkbench(LiveService(url))
    for kind, cls in KINDS:
        exc = example(cls)
        want = expected(exc)
        target.pending = [exc, exc, exc]
        assert rest(url) == want, kind
        async with Client(f"{url}/mcp") as client:
            assert from_mcp(await client.call_tool(TOOL, {})) == want, kind
        # what `workbench mcp` runs for each call: the tool on the remote service's tools
        assert from_mcp(await call_tool(remote, TOOL, {})) == want, kind
    remote.live.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_real_stdio_client_gets_every_kind(tmp_path, server_thread):
    """``workbench mcp`` as a subprocess, joining the service this test serves (its record
    names this process, which runs): every kind arrives as REST sends it."""
    settings = make_settings()
    target = Raising(settings)
    url = server_thread(create_app(target, settings)).url
    db = tmp_path / "kb.duckdb"
    write_record(str(db), url, False)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "service.control.cli", "mcp", "--db", str(db)],
        env=environ_without_settings(PYTHONPATH=str(REPO)),
        cwd=str(tmp_path),
    )
    with anyio.fail_after(120):
        async with Client(params) as client:
            for kind, cls in KINDS:
                exc = example(cls)
                target.pending = [exc]
                assert from_mcp(await client.call_tool(TOOL, {})) == expected(exc), kind


@pytest.mark.anyio
async def test_the_http_layers_kinds_reach_a_stdio_client(server_thread):
    """``unauthorized`` (a wrong token) and ``rate_limited`` (with its Retry-After) are answered
    before any tool runs; a stdio client relays them as they are."""
    settings = make_settings()
    settings = settings.model_copy(update={"api_token": SecretStr("the-admin-token-0123456789")})
    url = server_thread(create_app(Raising(settings), settings)).url
    wrong = RemoteWorkbench(LiveService(url, token="wbt_not-a-token"))
    kind, message, _ = from_mcp(await call_tool(wrong, TOOL, {}))
    assert kind == rest(url, {"Authorization": "Bearer wbt_x"})[0] == "unauthorized"
    assert "invalid bearer" in message
    limited = make_settings(SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE="1")
    target = Raising(limited)
    target.pending = [errors.NotFound("nothing here")]
    url = server_thread(create_app(target, limited)).url
    client = RemoteWorkbench(LiveService(url))
    with pytest.raises(errors.NotFound):
        client.live.call(TOOL)  # the one call of the minute
    kind, message, retry = from_mcp(await call_tool(client, TOOL, {}))
    assert kind == "rate_limited" and retry is not None and retry >= 1, message
    with pytest.raises(RelayedError) as raised:
        client.live.call(TOOL)
    assert raised.value.http_status == 429 and raised.value.retry_after == retry
    assert rest(url)[0] == "rate_limited"
