"""The memory browser's fixtures: a real service (uvicorn on loopback) over a seeded store,
and headless Chromium (Debian's package) driven by Playwright. Outside CI a machine without
Chromium or Playwright skips the browser tests; in CI (``CI=true``) they fail instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.api.app import create_app
from tests.service.svc_helpers import ServerThread, make_settings
from workbench.facade import Workbench
from workbench.metrics import Metrics

ADMIN = "admin-token-for-the-ui-tests"
XSS = "<script>alert(1)</script><img src=x onerror=alert(2)>"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for name in ("chromium", "chromium-headless-shell", "chromium-browser"):
        found = shutil.which(name) or (
            f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else None
        )
        if found:
            return found
    return None


def _unavailable(why: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the browser tests must run in CI: {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")  # its event loop ends with the module: later tests run their own
def browser() -> Iterator:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (the dev extra)")
    executable = chromium_path()
    if executable is None:
        _unavailable("no Chromium (Debian package chromium)")
    with sync_playwright() as playwright:
        # launch() gives the browser a fresh profile folder of its own (--user-data-dir)
        launched = playwright.chromium.launch(
            executable_path=executable, args=CHROMIUM_FLAGS, ignore_default_args=["--headless=new"]
        )
        yield launched
        launched.close()


def seed(wb: Workbench) -> dict[str, str]:
    """Two groups with episodes (passages) and imported facts, one holding script as text."""
    ids = {}
    for group, who in (("alice", "Alice"), ("bob", "Bob")):
        for i, text in enumerate(
            (
                f"{who} moved to Lisbon in March. {who} likes hiking in the hills.",
                f"{who} works at Acme as an engineer since 2024.",
                f"{who} said: my favourite editor is {XSS} and Neovim.",
            )
        ):
            answer = wb.add_memory(
                name=f"{who} note {i}" if i < 2 else f"note {XSS}",
                episode_body=text,
                group_id=group,
                reference_time=f"2025-0{i + 1}-10T09:00:00Z",
            )
            ids[f"{group}-episode-{i}"] = answer["episode_uuid"]
        lines = [
            {"type": "entity", "name": who, "entity_type": "Person", "summary": f"{who} is a user"},
            {"type": "fact", "source": who, "target": "Acme", "relation": "WORKS_AT",
             "fact": f"{who} works at Acme", "valid_at": "2024-01-01T00:00:00Z"},
            {"type": "fact", "source": who, "target": "Porto", "relation": "LIVES_IN",
             "fact": f"{who} lives in Porto", "valid_at": "2020-01-01T00:00:00Z",
             "invalid_at": "2025-03-01T00:00:00Z"},
            {"type": "fact", "source": who, "target": "Lisbon", "relation": "LIVES_IN",
             "fact": f"{who} lives in Lisbon", "valid_at": "2025-03-01T00:00:00Z"},
            {"type": "fact", "source": who, "target": XSS, "relation": "LIKES",
             "fact": f"{who} likes {XSS}"},
        ]  # fmt: skip
        wb.import_memories(lines, group_id=group)
    return ids


@pytest.fixture
def service(hash_embedder, tmp_path) -> Iterator:
    """A live service over a seeded store; ``.url``, ``.wb``, ``.ids``, ``.tokens``."""
    settings = make_settings(SVC_KNOWLEDGE_API_TOKEN=ADMIN, SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE="0")
    wb = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    ids = seed(wb)
    tokens = {
        "admin": ADMIN,
        "alice": wb.add_token("alice-rw", ["alice"])["token"],
        "reader": wb.add_token("alice-ro", ["alice"], read_only=True)["token"],
    }
    with ServerThread(create_app(wb, settings)) as server:
        server.wb, server.ids, server.tokens = wb, ids, tokens
        yield server
    wb.close()


@pytest.fixture
def shots(request) -> Path:
    """The folder of this test's screenshots, under pytest's base temporary folder."""
    base = request.config._tmp_path_factory.getbasetemp() / "ui-screenshots"
    base.mkdir(exist_ok=True)
    return base
