"""Tokens and the owner: the first scoped token never locks the owner out (#56.1), a token the
store knows is never the admin token (#55.2), and ``/health`` keeps its details from callers
without an admin token once any token exists (#55.11)."""

from __future__ import annotations

import json
import os
import stat

import httpx
import pytest
from litestar.testing import TestClient
from pydantic import SecretStr

from service.api.access import TokenResolver
from service.api.app import create_app
from service.client.live import find_live, write_record
from service.client.owner import client_token, owner_token_path, read_owner_token
from service.control.cli import main
from service.control.shared import background_environ
from service.sidecars.embed_server import create_embed_app
from tests.service.svc_helpers import BASE, make_settings
from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics
from workbench.store.tenancy import ADMIN


def open_file_wb(db):
    settings = make_settings(
        SVC_KNOWLEDGE_DB_PATH=str(db),
        SVC_KNOWLEDGE_EMBEDDER_BASE_URL="http://127.0.0.1:9/v1",
        SVC_KNOWLEDGE_EMBEDDER_MODEL="hash-bow",
        SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS="384",
    )
    return Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())


@pytest.fixture
def no_token_env(monkeypatch, server_thread):
    """The CLI's environment: no token, the compat embedder on a real embeddings server."""
    for name in list(os.environ):
        if name.startswith("SVC_KNOWLEDGE_"):
            monkeypatch.delenv(name)
    embed = server_thread(create_embed_app(HashEmbedder()))
    monkeypatch.setenv("SVC_KNOWLEDGE_EMBEDDER_BASE_URL", f"{embed.url}/v1")
    monkeypatch.setenv("SVC_KNOWLEDGE_EMBEDDER_MODEL", "hash-bow")
    monkeypatch.setenv("SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS", "384")


def test_the_first_scoped_token_creates_and_saves_the_owners_admin_token(
    tmp_path, capsys, no_token_env
):
    db = tmp_path / "kb.duckdb"
    with open_file_wb(db):
        pass  # a database file, as the owner's first session leaves it
    assert main(["tokens", "add", "alice", "--groups", "alpha", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    alice = out.split()[-1]
    assert "first scoped token" in err and str(owner_token_path(db)) in err
    owner = read_owner_token(db)
    assert owner and owner in err and owner != alice
    mode = owner_token_path(db).stat().st_mode
    assert stat.S_IMODE(mode) == 0o600
    with open_file_wb(db) as wb:
        assert wb.tenancy.caller(owner).admin and not wb.tenancy.caller(alice).admin
        names = [t["name"] for t in wb.list_tokens()["tokens"]]
    assert names == ["alice", "owner"]
    # a second scoped token: an admin token exists now, nothing more is made
    assert main(["tokens", "add", "bob", "--groups", "beta", "--db", str(db)]) == 0
    assert "first scoped token" not in capsys.readouterr().err
    # on the file (no service), list and revoke work for the owner
    assert main(["tokens", "list", "--db", str(db)]) == 0
    listed = json.loads(capsys.readouterr().out)["tokens"]
    assert [t["name"] for t in listed] == ["alice", "bob", "owner"]
    assert main(["tokens", "revoke", "bob", "--db", str(db)]) == 0


def test_the_owner_keeps_list_and_revoke_through_the_running_service(
    tmp_path, capsys, server_thread, no_token_env
):
    db = tmp_path / "kb.duckdb"
    with open_file_wb(db):
        pass
    assert main(["tokens", "add", "alice", "--groups", "alpha", "--db", str(db)]) == 0
    capsys.readouterr()
    wb = open_file_wb(db)
    try:
        url = server_thread(create_app(wb, wb.settings)).url
        write_record(str(db), url, False)  # this process holds the database: a live service
        assert main(["tokens", "list", "--db", str(db)]) == 0  # with the owner's token
        listed = json.loads(capsys.readouterr().out)
        assert {t["name"] for t in listed["tokens"]} == {"alice", "owner"}
        assert main(["tokens", "revoke", "alice", "--db", str(db)]) == 0
        assert "revoked" in capsys.readouterr().out
        # without the owner's token the service refuses, with the reason
        owner_token_path(db).unlink()
        assert main(["tokens", "list", "--db", str(db)]) == 1
        assert "missing bearer token" in capsys.readouterr().err
    finally:
        wb.close()


def test_an_untrusted_owner_file_is_not_used(tmp_path, no_token_env):
    db = tmp_path / "kb.duckdb"
    path = owner_token_path(db)
    path.write_text(json.dumps({"name": "owner", "token": "wbt_planted"}))
    os.chmod(path, 0o644)  # open to others: not the owner's private file
    assert read_owner_token(db) is None
    target = tmp_path / "elsewhere"
    target.write_text(json.dumps({"name": "owner", "token": "wbt_planted"}))
    os.chmod(target, 0o600)
    path.unlink()
    path.symlink_to(target)
    assert read_owner_token(db) is None
    settings = make_settings(SVC_KNOWLEDGE_DB_PATH=str(db), SVC_KNOWLEDGE_API_TOKEN="wbt_mine")
    assert client_token(settings) == "wbt_mine"  # the configured token always wins


def test_a_stored_token_is_never_the_admin_token(tmp_path):
    """A read-only token handed to a service as its admin secret stays read-only."""
    with open_file_wb(tmp_path / "kb.duckdb") as wb:
        reader = wb.add_token("reader", ["alpha"], read_only=True)["token"]
        resolver = TokenResolver(wb.tenancy, reader)
        for _ in range(2):  # the verdict is read once, then cached
            caller = resolver.resolve(reader)
            assert caller is not None and caller != ADMIN and caller.read_only
            assert resolver.cached(reader)[1] != ADMIN
        assert not resolver.known(b"another")
        plain = TokenResolver(wb.tenancy, "an-admin-secret-not-stored-123")
        assert plain.resolve("an-admin-secret-not-stored-123") == ADMIN


def test_the_background_service_never_gets_the_clients_token():
    env = background_environ({"SVC_KNOWLEDGE_API_TOKEN": "wbt_reader", "PATH": "/bin"})
    assert env["SVC_KNOWLEDGE_API_TOKEN"] == "" and env["PATH"] == "/bin"
    token = load_settings(env).api_token  # what the service reads: no admin token
    assert not (token and token.get_secret_value())


def test_health_details_need_an_admin_token_once_the_store_holds_tokens(tmp_path):
    with open_file_wb(tmp_path / "kb.duckdb") as wb:
        with TestClient(create_app(wb, wb.settings), base_url=BASE) as client:
            assert "checks" in client.get("/health").json()  # no token anywhere: the details
            scoped = wb.add_token("alice", ["alpha"])["token"]
            admin = wb.add_token("owner", admin=True)["token"]
            client.app.state  # noqa: B018 - the same app: its resolver reads the store
            wait_for_tokens(client)
            assert set(client.get("/health").json()) == {"status", "live", "ready"}
            brief = client.get("/health", headers={"Authorization": f"Bearer {scoped}"})
            assert set(brief.json()) == {"status", "live", "ready"}
            full = client.get("/health", headers={"Authorization": f"Bearer {admin}"})
            assert "checks" in full.json()


def wait_for_tokens(client, seconds: float = 10.0) -> None:
    """The resolver remembers "no token exists" for a few seconds."""
    import time

    deadline = time.monotonic() + seconds
    while client.post("/tools/get_status", json={}).status_code != 401:
        assert time.monotonic() < deadline
        time.sleep(0.2)


def test_a_client_with_a_stored_admin_secret_in_its_env_is_scoped(tmp_path, server_thread):
    """#55.2 end to end over REST: a service whose admin secret is a stored read-only token
    (what a background service started with a client's environment used to be) refuses
    that token's writes and admin tools."""
    db = tmp_path / "kb.duckdb"
    with open_file_wb(db) as wb:
        reader = wb.add_token("reader", ["alpha"], read_only=True)["token"]
        settings = wb.settings.model_copy(update={"api_token": SecretStr(reader)})
        url = server_thread(create_app(wb, settings)).url
        headers = {"Authorization": f"Bearer {reader}"}
        write = httpx.post(
            f"{url}/tools/add_memory",
            json={"name": "n", "episode_body": "x", "group_id": "beta"},
            headers=headers,
        )
        assert write.status_code == 403, write.text
        mint = httpx.post(
            f"{url}/tools/add_token", json={"name": "evil", "admin": True}, headers=headers
        )
        assert mint.status_code == 403, mint.text
        assert find_live(make_settings(SVC_KNOWLEDGE_DB_PATH=str(db))) is None
