"""One service, many people: scoped tokens (stored hashed), every tool within the caller's
groups over REST and MCP, list_groups, the groups a search covered and the audit trail (the
``workbench tokens`` commands: tests/service/test_cli.py)."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import httpx2
import pytest
from litestar.testing import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from service.api.app import create_app
from service.api.tools import TOOLS
from tests.service.svc_helpers import BASE, assert_error, call, make_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.metrics import Metrics

ADMIN = "admin-token-long-enough-123"
FACTS = {
    group: [
        {"type": "fact", "source": f"{who}", "target": "Acme", "relation": "WORKS_AT",
         "fact": f"{who} works at Acme."},
    ]
    for group, who in (("team-a", "Alice Adams"), ("team-b", "Bruno Brown"))
}  # fmt: skip


@pytest.fixture
def tenants():
    """A workbench with one fact and one episode in each of team-a and team-b, and tokens:
    ``a`` (team-a), ``ro`` (team-a, read-only), ``b`` (team-b)."""
    settings = make_settings(SVC_KNOWLEDGE_API_TOKEN=ADMIN)
    wb = Workbench.open(settings, embedder=HashEmbedder(), chat=None, metrics=Metrics())
    items = {}
    for group, lines in FACTS.items():
        wb.import_memories(lines, group_id=group)
        episode = wb.add_memory("note", f"a note of {group}", group_id=group)
        fact = wb.search_memory_facts("works at Acme", [group])["facts"][0]
        items[group] = {"episode": episode["episode_uuid"], "fact": fact["uuid"]}
    tokens = {
        "a": wb.add_token("alice", ["team-a"])["token"],
        "ro": wb.add_token("reader", ["team-a"], read_only=True)["token"],
        "b": wb.add_token("bruno", ["team-b"])["token"],
    }
    yield wb, items, tokens
    wb.close()


@pytest.fixture
def client(tenants):
    wb = tenants[0]
    with TestClient(create_app(wb, wb.settings), base_url=BASE) as test_client:
        yield test_client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_stored_as_hashes_and_listed_without_them(tenants):
    wb, _, tokens = tenants
    stored = json.dumps(wb.store.fetchall("SELECT * FROM api_tokens"), default=str)
    assert all(token not in stored for token in tokens.values())
    listed = wb.list_tokens()["tokens"]
    assert [t["name"] for t in listed] == ["alice", "bruno", "reader"]
    assert "token" not in listed[0] and listed[2]["read_only"] is True
    assert wb.tenancy.caller(tokens["a"]).groups == {"team-a"}
    assert wb.tenancy.caller("wbt_not-a-token") is None


def test_a_token_sees_only_its_groups(client, tenants):
    _, items, tokens = tenants
    a = bearer(tokens["a"])
    facts = call(client, "search_memory_facts", {"query": "works at Acme"}, headers=a)
    assert [f["group_id"] for f in facts["facts"]] == ["team-a"]
    assert facts["groups"] == ["team-a"]
    nodes = call(client, "search_memory_nodes", {"query": "Bruno Brown"}, headers=a)
    assert {n["group_id"] for n in nodes["nodes"]} <= {"team-a"} and nodes["groups"] == ["team-a"]
    episodes = call(client, "get_episodes", {}, headers=a)
    assert [e["group_id"] for e in episodes["episodes"]] == ["team-a"]
    recall = call(client, "search_memory", {"query": "a note of team Acme"}, headers=a)
    assert recall["results"] and recall["groups"] == ["team-a"]
    texts = " ".join(r.get("text") or r.get("fact") or "" for r in recall["results"])
    assert "team-a" in texts and "team-b" not in texts and "Bruno" not in texts
    groups = call(client, "list_groups", {}, headers=a)["groups"]
    assert groups == [{"group_id": "team-a", "episodes": 1, "entities": 2, "facts": 1}]
    # the admin sees every group, and the search says so
    everything = call(client, "search_memory_facts", {"query": "Acme"}, headers=bearer(ADMIN))
    assert everything["groups"] == ["team-a", "team-b"]


@pytest.mark.parametrize(
    ("tool", "body"),
    [
        ("search_memory_facts", {"query": "Acme", "group_ids": ["team-b"]}),
        ("search_memory", {"query": "a note", "group_ids": ["team-b"]}),
        ("search_memory_nodes", {"query": "Acme", "group_ids": ["team-a", "team-b"]}),
        ("get_episodes", {"group_id": "team-b"}),
        ("list_groups", {"group_ids": ["team-b"]}),
        ("clear_graph", {"group_ids": ["team-b"]}),
        ("add_memory", {"name": "x", "episode_body": "y", "group_id": "team-b"}),
        ("add_memory", {"name": "x", "episode_body": "y"}),  # the default group
        ("import_memories", {"lines": [{"type": "entity", "name": "X"}], "group_id": "team-b"}),
        (
            "import_memories",
            {
                "lines": ['{"type": "entity", "name": "X", "group_id": "team-b"}'],
                "group_id": "team-a",
            },
        ),  # fmt: skip
        ("retry_failed_episodes", {}),  # of every group
        ("retry_failed_episodes", {"group_id": "team-b"}),
    ],
)
def test_naming_another_group_is_forbidden(client, tenants, tool, body):
    _, _, tokens = tenants
    refused = call(client, tool, body, status=403, headers=bearer(tokens["a"]))
    assert_error(refused, "forbidden", "alice")


@pytest.mark.parametrize(
    ("tool", "kind", "field"),
    [
        ("get_entity_edge", "fact", "uuid"),
        ("delete_entity_edge", "fact", "uuid"),
        ("recover_soft_deleted", "fact", "uuid"),
        ("delete_episode", "episode", "uuid"),
    ],
)
def test_another_groups_uuid_is_a_404_like_a_missing_one(client, tenants, tool, kind, field):
    wb, items, tokens = tenants
    theirs, missing = items["team-b"][kind], "00000000-0000-4000-8000-000000000000"
    answers = []
    for uuid in (theirs, missing):
        value = [uuid] if field.endswith("s") else uuid
        body = call(client, tool, {field: value}, status=404, headers=bearer(tokens["a"]))
        answers.append(body["error"]["message"].replace(uuid, "U"))
    assert answers[0] == answers[1]  # no existence leak
    assert wb.get_entity_edge(items["team-b"]["fact"])  # still there


def test_another_groups_uuids_in_a_list_count_as_missing(client, tenants):
    wb, items, tokens = tenants
    wb.store.execute("UPDATE queue SET state = 'failed'")
    theirs = items["team-b"]["episode"]
    body = {"episode_uuids": [theirs]}
    assert call(client, "retry_failed_episodes", body, headers=bearer(tokens["a"])) == {
        "message": "0 failed episodes re-queued",
        "episode_uuids": [],
    }
    assert call(client, "retry_failed_episodes", body, headers=bearer(tokens["b"]))[
        "episode_uuids"
    ] == [theirs]


def test_the_queue_status_lists_no_failure_of_another_group(client, tenants):
    wb, items, tokens = tenants
    wb.store.execute("UPDATE queue SET state = 'failed', error_message = 'boom'")
    failed = call(client, "get_queue_status", {}, headers=bearer(tokens["a"]))["failed"]
    assert [f["group_id"] for f in failed] == ["team-a"]
    everything = call(client, "get_queue_status", {}, headers=bearer(ADMIN))["failed"]
    assert sorted(f["group_id"] for f in everything) == ["team-a", "team-b"]


def test_a_groups_failures_are_listed_however_many_newer_ones_other_groups_have(client, tenants):
    """Issue 55, item 16: the failures are filtered by group before the 20 newest are taken."""
    wb, items, tokens = tenants
    wb.store.execute("UPDATE queue SET state = 'failed', error_message = 'boom'")
    for i in range(25):  # 25 newer failures of team-b
        added = wb.add_memory(f"b{i}", f"another note {i}", group_id="team-b")
        wb.store.execute(
            "UPDATE queue SET state = 'failed', finished_at = now() + INTERVAL '1 hour' "
            "WHERE episode_uuid = ?",
            [added["episode_uuid"]],
        )
    failed = call(client, "get_queue_status", {}, headers=bearer(tokens["a"]))["failed"]
    assert [f["episode_uuid"] for f in failed] == [items["team-a"]["episode"]]
    named = call(client, "get_queue_status", {"group_ids": ["team-a"]}, headers=bearer(ADMIN))
    assert [f["group_id"] for f in named["failed"]] == ["team-a"]
    everything = call(client, "get_queue_status", {}, headers=bearer(ADMIN))["failed"]
    assert len(everything) == 20 and {f["group_id"] for f in everything} == {"team-b"}
    call(client, "get_queue_status", {"group_ids": ["team-b"]}, 403, headers=bearer(tokens["a"]))


def test_a_search_near_another_groups_entity_is_a_404(client, tenants):
    wb, _, tokens = tenants
    bruno = wb.search_memory_nodes("Bruno Brown", ["team-b"])["nodes"][0]["uuid"]
    body = {"query": "Acme", "center_node_uuid": bruno}
    call(client, "search_memory_facts", body, status=404, headers=bearer(tokens["a"]))


def test_read_only_and_admin_only(client, tenants):
    _, items, tokens = tenants
    ro, a = bearer(tokens["ro"]), bearer(tokens["a"])
    call(client, "search_memory_facts", {"query": "Acme"}, headers=ro)
    for tool, body in (
        ("add_memory", {"name": "x", "episode_body": "y", "group_id": "team-a"}),
        ("delete_episode", {"uuid": items["team-a"]["episode"]}),
        ("clear_graph", {"group_ids": ["team-a"]}),
    ):
        assert_error(call(client, tool, body, status=403, headers=ro), "forbidden", "read-only")
    for tool, body in (
        ("export_snapshot", None),
        ("run_decay_maintenance", {"dry_run": True}),
        ("list_tokens", None),
        ("add_token", {"name": "mine", "admin": True}),
        ("revoke_token", {"name": "bruno"}),
    ):
        assert_error(call(client, tool, body, status=403, headers=a), "forbidden", "admin")
    made = call(client, "add_token", {"name": "carol", "groups": ["team-c"]}, headers=bearer(ADMIN))
    assert made["token"].startswith("wbt_")


def test_classify_memory_spends_an_llm_call_so_a_read_only_token_may_not(client, tenants):
    """Issue 55, item 10: the tool is a write (it spends) and its text is bounded."""
    _, _, tokens = tenants
    refused = call(client, "classify_memory", {"text": "Tea."}, 403, headers=bearer(tokens["ro"]))
    assert_error(refused, "forbidden", "read-only")
    rated = call(client, "classify_memory", {"text": "Tea."}, headers=bearer(tokens["a"]))
    assert rated["importance"] in range(1, 6)
    long = {"text": "x" * 4_001}
    assert_error(call(client, "classify_memory", long, 400, headers=bearer(tokens["a"])),
                 "invalid_input", "text")  # fmt: skip


def test_idempotency_keys_and_episode_uuids_are_scoped_to_the_caller(client, tenants):
    """Issue 55, item 8: another tenant cannot claim a key or a uuid first (the victim is
    never refused), and its answer does not say the key was used."""
    wb, _, tokens = tenants
    a, b = bearer(tokens["a"]), bearer(tokens["b"])
    body = {"name": "n", "episode_body": "Bruno likes tea."}
    key = {"Idempotency-Key": "req-1"}
    claimed = call(client, "add_memory", {**body, "group_id": "team-b"}, headers=b | key)
    mine = call(client, "add_memory", {**body, "group_id": "team-a"}, headers=a | key)
    assert mine["episode_uuid"] != claimed["episode_uuid"] and mine["group_id"] == "team-a"
    assert "queued" in mine["message"]  # not "added before": nothing tells it was used
    again = call(client, "add_memory", {**body, "group_id": "team-a"}, headers=a | key)
    assert again["episode_uuid"] == mine["episode_uuid"] and "added before" in again["message"]
    # the derived uuid is not computable from the key alone
    import uuid as uuidlib

    from service.api.app import IDEMPOTENCY_NAMESPACE

    assert mine["episode_uuid"] != str(uuidlib.uuid5(IDEMPOTENCY_NAMESPACE, "req-1"))
    # an explicit uuid another group holds: stored under a uuid of the caller's group
    theirs = claimed["episode_uuid"]
    first = call(client, "add_memory", {**body, "group_id": "team-a", "uuid": theirs}, headers=a)
    assert first["group_id"] == "team-a" and first["episode_uuid"] != theirs
    retry = call(client, "add_memory", {**body, "group_id": "team-a", "uuid": theirs}, headers=a)
    assert retry["episode_uuid"] == first["episode_uuid"] and "added before" in retry["message"]
    assert wb.store.fetchone("SELECT group_id FROM episodes WHERE uuid = ?", [theirs]) == (
        "team-b",
    )
    passages = wb.store.fetchall(
        "SELECT DISTINCT episode_uuid FROM passages WHERE group_id = 'team-a' AND text LIKE "
        "'Bruno%'"
    )
    assert sorted(p[0] for p in passages) == sorted({mine["episode_uuid"], first["episode_uuid"]})


def test_every_tool_is_scoped_by_its_arguments():
    """A tool reads or changes groups only through argument names the scope check knows, is
    admin-only, or answers service-wide counts only: a new tool cannot slip past the check."""
    service_wide = {"get_status", "get_queue_status", "get_knowledge_health", "classify_memory"}
    for tool in TOOLS:
        fields = set(tool.args.model_fields)
        scoped = fields & {"group_id", "group_ids", "uuid"} or any(
            f.endswith(("_uuid", "_uuids")) for f in fields
        )
        assert tool.admin or scoped or tool.name in service_wide, tool.name


def test_clearing_a_group_is_audited_with_the_tokens_name(client, tenants):
    wb, _, tokens = tenants
    call(client, "clear_graph", {"group_ids": ["team-b"]}, headers=bearer(tokens["b"]))
    call(client, "clear_graph", {"group_ids": ["team-b"]}, status=403, headers=bearer(tokens["a"]))
    rows = wb.frame("audit_log").to_dict("records")
    assert [(r["token_name"], r["tool"], r["groups"], r["outcome"]) for r in rows] == [
        ("bruno", "clear_graph", "team-b", "ok"),
        ("alice", "clear_graph", "team-b", "forbidden"),
    ]
    assert call(client, "list_groups", {}, headers=bearer(tokens["b"]))["groups"] == [
        {"group_id": "team-b", "episodes": 0, "entities": 0, "facts": 0}
    ]


def test_a_revoked_token_is_refused_within_seconds(client, tenants):
    wb, _, tokens = tenants
    a = bearer(tokens["a"])
    call(client, "list_groups", {}, headers=a)
    wb.revoke_token("alice")
    started = time.monotonic()
    while client.post("/tools/list_groups", json={}, headers=a).status_code != 401:
        assert time.monotonic() - started < 10
        time.sleep(0.2)
    assert call(client, "list_groups", {}, headers=bearer(tokens["b"]))


def test_stored_tokens_alone_require_a_token(tenants):
    wb = tenants[0]
    settings = wb.settings.model_copy(update={"api_token": None})
    with TestClient(create_app(wb, settings), base_url=BASE) as open_client:
        assert_error(call(open_client, "list_groups", {}, status=401), "unauthorized")
        call(open_client, "list_groups", {}, headers=bearer(tenants[2]["b"]))


def test_no_token_anywhere_behaves_as_before(plain):
    call(plain, "get_episodes", {})  # the module's LLM-less workbench: no token at all


@pytest.mark.anyio
async def test_mcp_enforces_the_same_scope(tenants, server_thread):
    wb, items, tokens = tenants
    url = server_thread(create_app(wb, wb.settings)).url + "/mcp"
    async with httpx2.AsyncClient(headers=bearer(tokens["a"])) as http:
        async with Client(streamable_http_client(url, http_client=http)) as mcp:
            found = await mcp.call_tool("search_memory_facts", {"query": "works at Acme"})
            assert [f["group_id"] for f in found.structured_content["facts"]] == ["team-a"]
            assert found.structured_content["groups"] == ["team-a"]
            other = await mcp.call_tool(
                "search_memory_facts", {"query": "Acme", "group_ids": ["team-b"]}
            )
            assert other.is_error and other.structured_content["error"]["type"] == "forbidden"
            hidden = await mcp.call_tool("delete_entity_edge", {"uuid": items["team-b"]["fact"]})
            assert hidden.structured_content["error"]["type"] == "not_found"
            admin = await mcp.call_tool("export_snapshot", {})
            assert admin.structured_content["error"]["type"] == "forbidden"
            groups = await mcp.call_tool("list_groups", {})
            assert [g["group_id"] for g in groups.structured_content["groups"]] == ["team-a"]
    async with httpx2.AsyncClient(headers=bearer(tokens["ro"])) as http:
        async with Client(streamable_http_client(url, http_client=http)) as mcp:
            write = await mcp.call_tool("add_memory", {"name": "x", "episode_body": "y"})
            assert write.structured_content["error"]["type"] == "forbidden"
    assert wb.get_entity_edge(items["team-b"]["fact"])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_maintenance_prunes_the_audit_trail_past_its_retention(tenants):
    wb = tenants[0]
    now = wb.clock()
    wb.tenancy.audit("alice", "clear_graph", ["team-a"], [], "ok")
    wb.store.execute(
        "INSERT INTO audit_log (ts, token_name, tool, groups, uuids, outcome) "
        "VALUES (?, 'old', 'delete_episode', '', '', 'ok')",
        [now - timedelta(days=wb.settings.audit_retention_days + 1)],
    )
    wb.run_decay_maintenance()
    assert [r[0] for r in wb.store.fetchall("SELECT token_name FROM audit_log")] == ["alice"]


def test_health_says_when_the_models_calls_have_no_price(fake_llm, hash_embedder):
    from service.api.health import EmbedderProbe, health
    from workbench.fakes.chat_server import chat_settings_env

    unpriced = {**chat_settings_env(fake_llm), "SVC_KNOWLEDGE_MODEL_NAME": "no-such-model-x"}
    for env, priced in (
        (unpriced, False),
        ({**unpriced, "SVC_KNOWLEDGE_MODEL_NAME": "gpt-4o"}, True),
    ):
        settings = make_settings(**env)
        wb = Workbench.open(settings, embedder=hash_embedder, metrics=Metrics())
        try:
            llm = health(wb, EmbedderProbe(wb.embedder))[0]["checks"]["llm"]
        finally:
            wb.close()
        assert llm["priced"] is priced
        assert ("no price for model 'no-such-model-x'" in llm.get("price_detail", "")) is not priced


def test_scoped_tokens_have_their_own_rate_limit_buckets(tenants):
    from tests.service.svc_helpers import Tick

    wb, _, tokens = tenants
    settings = wb.settings.model_copy(update={"rate_limit_per_minute": 2})
    with TestClient(create_app(wb, settings, rate_clock=Tick()), base_url=BASE) as client:
        a, b = bearer(tokens["a"]), bearer(tokens["b"])
        # a token's first request counts on the address (not verified yet), the rest on it
        for _ in range(3):
            call(client, "list_groups", {}, headers=a)
        assert client.post("/tools/list_groups", json={}, headers=a).status_code == 429
        for _ in range(3):  # another token from the same address has its own bucket
            call(client, "list_groups", {}, headers=b)


def test_a_stand_in_workbench_keeps_its_own_error():
    """``workbench mcp`` on a database it cannot open: the tool error is the reason, with no
    audit or covered-groups step tripping over the stand-in."""
    from service.api.tools import get_tool
    from service.client.live import UnavailableWorkbench
    from workbench.errors import StoreError

    stand_in = UnavailableWorkbench("the database is gone")
    for name, args in (("clear_graph", {"group_ids": ["g"]}), ("get_episodes", {})):
        with pytest.raises(StoreError, match="the database is gone"):
            get_tool(name).invoke(stand_in, args)


def test_during_a_store_outage_the_last_answers_stand_and_unknown_tokens_are_refused():
    """The resolver keeps what the store last said (whether tokens exist, a token's caller)
    while the store is away; a token it never read cannot be checked and is refused."""
    from service.api.access import TokenResolver
    from workbench.errors import StoreUnavailable

    class Tenancy:
        down = False

        def any_tokens(self):
            if self.down:
                raise StoreUnavailable("the database is unreachable")
            return True

        def caller(self, token):
            if self.down:
                raise StoreUnavailable("the database is unreachable")
            return "alice" if token == "known" else None

    now = [0.0]
    tenancy = Tenancy()
    resolver = TokenResolver(tenancy, ttl=5.0, clock=lambda: now[0])
    assert resolver.required() is True and resolver.resolve("known") == "alice"
    tenancy.down, now[0] = True, 60.0  # past the ttl: the store would be asked again
    assert resolver.required() is True and resolver.resolve("known") == "alice"
    with pytest.raises(StoreUnavailable):
        resolver.resolve("never-seen")
    with pytest.raises(StoreUnavailable):
        TokenResolver(tenancy).required()
