"""The memory browser over HTTP (no browser): its files and their security headers, which
paths need a token, who a token is (/ui/session), the browsing tools within a token's scope,
and the origin checks every write passes."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient

from service.api.app import create_app
from service.ui.routes import CSP, static_files
from tests.service.svc_helpers import BASE, assert_error, call, make_settings
from tests.ui.conftest import ADMIN, seed
from workbench.facade import Workbench
from workbench.metrics import Metrics


@pytest.fixture
def wb(hash_embedder):
    settings = make_settings(SVC_KNOWLEDGE_API_TOKEN=ADMIN)
    workbench = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    workbench.ids = seed(workbench)
    workbench.tokens = {
        "rw": workbench.add_token("alice-rw", ["alice"])["token"],
        "ro": workbench.add_token("alice-ro", ["alice"], read_only=True)["token"],
    }
    yield workbench
    workbench.close()


@pytest.fixture
def client(wb):
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_the_page_and_its_files_need_no_token_and_carry_a_strict_policy(client):
    for path in ("/ui", "/ui/", *(f"/ui/{name}" for name in static_files())):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-security-policy"] == CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    assert "default-src 'self'" in CSP and "unsafe-inline" not in CSP and "unsafe-eval" not in CSP
    page = client.get("/ui").text
    assert '<script type="module" src="/ui/app.js"></script>' in page
    assert "<style" not in page and " style=" not in page and "onclick" not in page
    assert client.get("/ui/app.js").headers["content-type"].startswith("text/javascript")


def test_no_file_outside_the_shipped_ones_is_served(client):
    for path in ("/ui/nothing.js", "/ui/../routes.py", "/ui/%2e%2e/routes.py", "/ui/__init__.py"):
        assert client.get(path).status_code in (401, 404), path


def test_the_session_says_who_the_token_is(client, wb):
    assert client.get("/ui/session").status_code == 401  # the data paths need a token
    assert client.get("/ui/session", headers=bearer(ADMIN)).json()["admin"] is True
    reader = client.get("/ui/session", headers=bearer(wb.tokens["ro"])).json()
    assert reader == {"token": "alice-ro", "admin": False, "read_only": True, "groups": ["alice"]}


def test_the_browsing_tools_keep_to_the_tokens_groups(client, wb):
    rw, ro = bearer(wb.tokens["rw"]), bearer(wb.tokens["ro"])
    groups = call(client, "get_group_stats", {}, headers=ro)["groups"]
    assert [g["group_id"] for g in groups] == ["alice"]
    assert call(client, "list_episodes", {"group_id": "alice"}, headers=ro)["total"] == 3
    body = call(client, "list_facts", {"group_id": "bob"}, status=403, headers=ro)
    assert_error(body, "forbidden", "may not use group bob")
    bob_episode = wb.ids["bob-episode-0"]
    call(client, "get_episode", {"uuid": bob_episode}, status=404, headers=rw)
    bob = wb.pages.list_entities("bob", name_contains="bob")["entities"][0]["uuid"]
    call(client, "get_entity", {"uuid": bob}, status=404, headers=rw)
    call(client, "delete_entity", {"uuid": bob}, status=404, headers=rw)
    alice = wb.pages.list_entities("alice", name_contains="alice")["entities"][0]["uuid"]
    assert_error(
        call(client, "delete_entity", {"uuid": alice}, status=403, headers=ro), "forbidden"
    )
    assert call(client, "delete_entity", {"uuid": alice}, headers=rw)["facts_removed"] == 4
    audit = wb.store.fetch_dicts("SELECT token_name, tool, uuids, outcome FROM audit_log")
    outcomes = {(a["token_name"], a["tool"], a["outcome"]) for a in audit}
    assert {("alice-rw", "delete_entity", "ok"), ("alice-ro", "delete_entity", "forbidden")} <= (
        outcomes
    )
    assert any(alice in a["uuids"] for a in audit if a["outcome"] == "ok")


def test_a_write_from_another_origin_is_refused_even_with_a_valid_token(client, wb):
    episode = wb.ids["alice-episode-0"]
    headers = {**bearer(ADMIN), "Origin": "http://evil.example"}
    body = call(client, "delete_episode", {"uuid": episode}, status=403, headers=headers)
    assert_error(body, "forbidden", "cross-origin")
    form = client.post(
        "/tools/delete_episode",
        content=f'{{"uuid": "{episode}"}}',
        headers={**bearer(ADMIN), "Content-Type": "text/plain"},
    )
    assert form.status_code == 415  # what a plain HTML form can send is not JSON
    assert wb.pages.get_episode(episode)["episode"]["uuid"] == episode
    same = {**bearer(ADMIN), "Origin": BASE}
    assert call(client, "delete_episode", {"uuid": episode}, headers=same)["message"]


def test_in_ci_a_missing_browser_fails_the_tests_instead_of_skipping_them(monkeypatch):
    from tests.ui.conftest import _unavailable

    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="must run in CI"):
        _unavailable("no Chromium")
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception):
        _unavailable("no Chromium")


def test_the_scripts_never_build_markup_from_strings():
    """Values go in as text: no script of the page parses a string as HTML or code (the
    browser tests check the result; this catches the first such line)."""
    import re

    from service.ui.routes import STATIC

    sink = re.compile(
        r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function"
    )
    found = {
        path.name: sink.findall(path.read_text())
        for path in STATIC.rglob("*.js")
        if sink.search(path.read_text())
    }
    assert found == {}
    assert sink.search("el.innerHTML = value")  # the pattern bites
