"""The memory browser in a real browser (headless Chromium): sign in, every page, search, the
corrections, a read-only token, script in memories shown as text, and a write from another
origin refused. Each page's screenshot goes under pytest's base temporary folder
(``ui-screenshots/``)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from service.api.app import create_app
from tests.service.svc_helpers import ServerThread, make_settings
from tests.ui.conftest import XSS, seed
from workbench.facade import Workbench
from workbench.metrics import Metrics

pytestmark = [
    pytest.mark.timeout(180),
    # the page's SQL runs on both backends in tests/store/test_browse.py and tests/ui/test_routes.py
    pytest.mark.duckdb_only("the browser is the same over either store; once is enough"),
]


class Watch:
    """A page with everything that must not happen recorded: a JS dialog (alert), an uncaught
    error, a console error (a CSP violation is one)."""

    def __init__(self, browser, url: str):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(15_000)
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("dialog", self._dialog)
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
        )
        self.url = url

    def _dialog(self, dialog) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def sign_in(self, token: str) -> None:
        self.page.goto(self.url + "/ui")
        self.page.fill("#token", token)
        self.page.click("#signin button[type=submit]")
        self.page.wait_for_selector("table.groups")
        # the page asked who it is before it had a token: that 401 is how it knew to ask
        self.errors = [e for e in self.errors if "401 (Unauthorized)" not in e]

    def shot(self, folder, name: str) -> None:
        path = folder / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        assert path.stat().st_size > 5000  # a page was drawn

    def clean(self, *expected_errors: str) -> None:
        """No dialog fired, no script error (the expected refusals aside)."""
        assert self.dialogs == []
        unexpected = [e for e in self.errors if not any(x in e for x in expected_errors)]
        assert unexpected == []
        assert self.page.evaluate("() => window.__xss === undefined")
        self.context.close()


def no_injected_markup(page) -> None:
    """The memory's script and image tags are text: none is an element of the page."""
    assert page.locator("script").count() == 1  # the page's own module only
    assert page.locator("img").count() == 0


def test_sign_in_and_every_page_shows_script_as_text(browser, service, shots):
    w = Watch(browser, service.url)
    w.page.goto(service.url + "/ui")
    w.page.wait_for_selector("#signin")
    w.shot(shots, "01-sign-in")
    w.page.fill("#token", "wrong-token")
    w.page.click("#signin button[type=submit]")
    w.page.wait_for_selector("#signin .error")
    assert "not valid" in w.page.inner_text("#signin .error")
    assert "wrong-token" not in w.page.url and w.page.evaluate("() => sessionStorage.length") == 0
    w.sign_in(service.tokens["admin"])
    assert service.tokens["admin"] not in w.page.url
    groups = w.page.inner_text("table.groups")
    assert "alice" in groups and "bob" in groups
    w.shot(shots, "02-groups")

    w.page.click("text=alice")
    w.page.wait_for_selector("ol.timeline li.entry")
    assert w.page.locator("ol.timeline li.entry").count() == 3
    entry = w.page.locator("li.entry", has_text="Alice said")
    assert XSS in entry.inner_text()  # the preview, as text
    entry.locator("button.open").click()
    w.page.wait_for_selector("li.entry pre.body")
    assert XSS in w.page.inner_text("li.entry pre.body")
    assert "Passages (1)" in entry.inner_text()
    no_injected_markup(w.page)
    w.shot(shots, "03-timeline")

    w.page.click(".tabs >> text=Facts")
    w.page.wait_for_selector("table.facts")
    facts = w.page.inner_text("table.facts")
    assert "Alice lives in Porto" in facts and "superseded" in facts.lower()
    assert f"Alice likes {XSS}" in facts
    w.page.select_option("select", "current")
    w.page.wait_for_function(
        "() => !document.querySelector('table.facts').innerText.includes('Porto')"
    )
    w.page.select_option("select", "all")
    w.page.wait_for_selector("text=Alice lives in Porto")
    w.shot(shots, "04-facts")

    w.page.click(".tabs >> text=Entities")
    w.page.wait_for_selector("table.entities")
    w.page.click("table.entities >> text=Alice")
    w.page.wait_for_selector("svg.graph .node")
    assert w.page.locator("svg.graph g.node").count() == 5  # Alice + 4 neighbours
    assert XSS[:20] in w.page.inner_text(".entity-panel")
    no_injected_markup(w.page)
    w.shot(shots, "05-entity")

    w.page.click("#nav >> text=Search")
    w.page.fill("#q", "where does Alice live")
    w.page.click("form.search button")
    w.page.wait_for_selector("ol.hits li.hit")
    hits = w.page.locator("ol.hits li.hit")
    assert hits.count() > 1
    text = w.page.inner_text("ol.hits")
    assert "fact" in text and "similarity" in text and "keyword" in text
    w.page.fill("#q", "favourite editor")
    w.page.click("form.search button")
    w.page.wait_for_selector("li.hit.passage")
    assert XSS in w.page.inner_text("ol.hits")
    no_injected_markup(w.page)
    w.shot(shots, "06-search")

    w.page.click("#nav >> text=Health")
    w.page.wait_for_selector("table.costs")
    health = w.page.inner_text("main")
    assert "ACTIVE" in health and "Extraction queue" in health
    w.shot(shots, "07-health")
    w.clean()


def test_delete_a_fact_an_entity_and_an_episode_with_confirmation(browser, service, shots):
    wb = service.wb
    w = Watch(browser, service.url)
    w.sign_in(service.tokens["alice"])
    assert "bob" not in w.page.inner_text("table.groups")  # only the token's groups

    w.page.goto(service.url + "/ui#/group/alice/facts")
    row = w.page.locator("table.facts tr", has_text="Alice lives in Porto")
    row.locator("button.danger").click()
    w.page.wait_for_selector("dialog#confirm[open]")
    assert "Alice lives in Porto" in w.page.inner_text("#confirm-text")
    w.shot(shots, "08-confirm-delete")
    w.page.click("#confirm-cancel")
    assert wb.pages.list_facts("alice", state="superseded")["total"] == 1  # cancelled: still there
    row.locator("button.danger").click()
    w.page.click("#confirm-ok")
    w.page.wait_for_selector("#toast:not([hidden])")
    w.page.wait_for_function(
        "() => !document.querySelector('table.facts').innerText.includes('Porto')"
    )
    assert wb.pages.list_facts("alice", state="superseded")["total"] == 0

    w.page.goto(service.url + "/ui#/group/alice/entities")
    w.page.click("table.entities >> text=Lisbon")
    w.page.wait_for_selector(".entity-panel button.danger")
    w.page.click(".entity-panel button.danger")
    assert "Lisbon" in w.page.inner_text("#confirm-text")
    w.page.click("#confirm-ok")
    w.page.wait_for_selector("#toast:has-text('Lisbon')")
    assert wb.pages.list_entities("alice", name_contains="lisbon")["total"] == 0

    w.page.goto(service.url + "/ui#/group/alice/timeline")
    entry = w.page.locator("li.entry", has_text="Alice note 1")
    entry.locator("button.open").click()
    entry.locator("button.danger").click()
    assert "Alice note 1" in w.page.inner_text("#confirm-text")
    w.page.click("#confirm-ok")
    w.page.wait_for_function("() => document.querySelectorAll('li.entry').length === 2")
    assert wb.pages.list_episodes("alice")["total"] == 2

    audit = wb.store.fetch_dicts("SELECT token_name, tool, outcome FROM audit_log ORDER BY id")
    done = [(a["token_name"], a["tool"], a["outcome"]) for a in audit]
    for tool in ("delete_entity_edge", "delete_entity", "delete_episode"):
        assert ("alice-rw", tool, "ok") in done
    w.clean()


def test_a_read_only_token_sees_no_edit_controls_and_cannot_delete(browser, service, shots):
    w = Watch(browser, service.url)
    w.sign_in(service.tokens["reader"])
    assert "read-only" in w.page.inner_text("#who")
    assert "bob" not in w.page.inner_text("table.groups")
    for tab, ready in (
        ("timeline", "li.entry"),
        ("facts", "table.facts"),
        ("entities", "table.entities"),
    ):
        w.page.goto(service.url + f"/ui#/group/alice/{tab}")
        w.page.wait_for_selector(ready)
        if tab == "timeline":
            w.page.locator("li.entry button.open").first.click()
            w.page.wait_for_selector("li.entry pre.body")
        if tab == "entities":
            w.page.click("table.entities >> text=Alice")
            w.page.wait_for_selector("svg.graph")
        assert w.page.locator("main button").filter(has_text="Delete").count() == 0, tab
    w.shot(shots, "09-read-only")
    fact = service.wb.pages.list_facts("alice")["facts"][0]["uuid"]
    status = w.page.evaluate(
        """async (uuid) => (await fetch('/tools/delete_entity_edge', {method: 'POST',
             headers: {'Content-Type': 'application/json',
                       Authorization: 'Bearer ' + sessionStorage.getItem('workbench.ui.token')},
             body: JSON.stringify({uuid})})).status""",
        fact,
    )
    assert status == 403
    assert service.wb.get_entity_edge(fact)["uuid"] == fact
    w.page.goto(service.url + "/ui#/group/bob/facts")  # another group's page: refused
    w.page.wait_for_selector("main .error")
    assert "may not use group bob" in w.page.inner_text("main .error")
    w.clean("403")


class _Evil(BaseHTTPRequestHandler):
    """A page on another origin that tries to delete an episode of the service."""

    target = ""
    episode = ""

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        script = f"""
            const body = JSON.stringify({{uuid: {json.dumps(self.episode)}}});
            const url = {json.dumps(self.target)} + '/tools/delete_episode';
            const tries = [
              fetch(url, {{method: 'POST', headers: {{'Content-Type': 'application/json'}}, body}}),
              fetch(url, {{method: 'POST', mode: 'no-cors',
                           headers: {{'Content-Type': 'text/plain'}}, body}}),
            ];
            Promise.allSettled(tries).then((r) => {{
              document.title = 'done:' + r.map((x) => x.status).join(',');
            }});"""
        page = f"<!doctype html><title>evil</title><script>{script}</script>".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args) -> None:
        pass


def test_a_write_from_another_origin_is_refused(browser, hash_embedder):
    """No token in use (the local default): only the origin checks stand between a page the
    user visits and the memory."""
    settings = make_settings(SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE="0")
    wb = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    episode = seed(wb)["alice-episode-0"]
    evil = ThreadingHTTPServer(("127.0.0.1", 0), _Evil)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    try:
        with ServerThread(create_app(wb, settings)) as server:
            _Evil.target, _Evil.episode = server.url.replace("127.0.0.1", "localhost"), episode
            w = Watch(browser, server.url)
            w.page.goto(f"http://127.0.0.1:{evil.server_address[1]}/")
            w.page.wait_for_function("() => document.title.startsWith('done:')")
            assert wb.pages.get_episode(episode)["episode"]["uuid"] == episode  # still there
            w.page.goto(server.url + "/ui")  # no token in use: no sign-in, the local user
            w.page.wait_for_selector("table.groups")
            assert "no token in use" in w.page.inner_text("#who")
            assert w.page.evaluate("() => sessionStorage.length") == 0
            w.clean("CORS", "Failed to load", "403", "415")
    finally:
        evil.shutdown()
        wb.close()


def test_an_extracted_fact_quotes_the_passage_it_came_from(browser, fake_llm, hash_embedder):
    from workbench.fakes import rule_llm

    fake_llm.set_responder(rule_llm.respond)
    settings = make_settings(fake_llm, SVC_KNOWLEDGE_RATE_LIMIT_PER_MINUTE="0")
    wb = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
    body = "Maria Keller works at Acme. Maria Keller lives in Munich."
    wb.add_memory("intro", body, group_id="maria", reference_time="2025-05-01T08:00:00Z")
    assert wb.process_pending() == 1
    try:
        with ServerThread(create_app(wb, settings)) as server:
            w = Watch(browser, server.url)
            w.page.goto(server.url + "/ui#/group/maria/facts")
            w.page.wait_for_selector("table.facts")
            row = w.page.locator("table.facts tr", has_text="Acme").first
            assert "intro" in row.inner_text()  # the episode it came from
            row.locator("button.link").click()
            quote = row.locator(".sources blockquote").first
            quote.wait_for()
            assert "Maria Keller works at Acme" in quote.inner_text()
            w.page.click(".tabs >> text=Timeline")
            w.page.wait_for_selector("li.entry")
            assert "done" in w.page.inner_text("li.entry .meta")
            w.clean()
    finally:
        wb.close()
