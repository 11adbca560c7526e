"""A history import: ChatGPT, Claude and generic JSON-lines exports (made here, in their real
shapes) become message episodes, searchable by their words when the import returns; the same
file twice adds nothing; a broken conversation is reported by position and skipped; extraction
is queued at low priority only when asked, priced first."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime

import pytest

from workbench.clock import ManualClock
from workbench.config import load_settings
from workbench.errors import InvalidInput
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.jobs.conversations import detect, is_conversations, parse, read_records, sessions
from workbench.jobs.history import HistoryImport, episode_uuid, import_history

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)
DAY = 86400.0
JAN = datetime(2025, 1, 10, 9, tzinfo=UTC).timestamp()


def open_wb(**env) -> Workbench:
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:", **env}, env_file=None)
    return Workbench.open(settings, embedder=HashEmbedder(), chat=None, clock=ManualClock(T0))


@pytest.fixture
def wb():
    with open_wb() as workbench:
        yield workbench


# --- exports in their real shapes ---------------------------------------------------------------
def chatgpt_node(node_id, parent, children, role, text, at):
    message = None
    if role:
        message = {"id": node_id, "author": {"role": role, "name": None, "metadata": {}},
                   "create_time": at, "update_time": None,
                   "content": {"content_type": "text", "parts": [text]},
                   "status": "finished_successfully", "metadata": {},
                   "recipient": "all"}  # fmt: skip
    return {"id": node_id, "message": message, "parent": parent, "children": children}


def chatgpt_conversation(cid, title, turns, at=JAN, branch=False):
    """A conversation of ChatGPT's export: a root, a system message, then the turns; with
    ``branch`` an edited first question whose abandoned answer is not on the current path."""
    mapping = {"root": chatgpt_node("root", None, ["sys"], None, "", None),
               "sys": chatgpt_node("sys", "root", ["m0"], "system", "Be brief.", at)}  # fmt: skip
    parent = "sys"
    for i, (role, text) in enumerate(turns):
        node = f"m{i}"
        children = [f"m{i + 1}"] if i + 1 < len(turns) else []
        mapping[node] = chatgpt_node(node, parent, children, role, text, at + 60 * i)
        parent = node
    if branch:
        mapping["sys"]["children"].append("old")
        mapping["old"] = chatgpt_node("old", "sys", [], "user", "abandoned draft", at)
    return {"title": title, "create_time": at, "update_time": at, "mapping": mapping,
            "current_node": parent, "conversation_id": cid, "id": cid,
            "moderation_results": [], "is_archived": False}  # fmt: skip


def claude_conversation(uid, name, turns, at="2025-02-03T10:00:00.000000Z"):
    msgs = []
    for i, (sender, text) in enumerate(turns):
        item = {"uuid": f"{uid}-{i}", "sender": sender, "created_at": at, "updated_at": at,
                "attachments": [], "files": []}  # fmt: skip
        if i % 2:  # newer exports: content blocks, empty text
            item.update(text="", content=[{"type": "text", "text": text}])
        else:
            item["text"] = text
        msgs.append(item)
    return {"uuid": uid, "name": name, "created_at": at, "updated_at": at,
            "account": {"uuid": "acct"}, "chat_messages": msgs}  # fmt: skip


def write_json(path, value):
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def search_words(wb, query, group="main"):
    return wb.search_memory(query, group_ids=[group], kinds=["passage"])["results"]


# --- formats ------------------------------------------------------------------------------------
def test_a_chatgpt_export_follows_the_current_branch_and_skips_system_messages(wb, tmp_path):
    export = [
        chatgpt_conversation(
            "c-1",
            "Boiler",
            [
                ("user", "When was the boiler serviced?"),
                ("assistant", "Last October, by Heatwise."),
            ],
            branch=True,
        ),  # fmt: skip
        chatgpt_conversation("c-2", "Trip", [("user", "Book the Lisbon ferry for Friday")]),
    ]
    path = write_json(tmp_path / "conversations.json", export)
    report = wb.import_memories(read_records(path)[0], format="chatgpt")
    assert report["format"] == "chatgpt" and report["episodes_created"] == 2
    assert report["error_count"] == 0
    body = wb.store.fetchone("SELECT body FROM episodes WHERE name = 'Boiler'")[0]
    assert body == "user: When was the boiler serviced?\nassistant: Last October, by Heatwise."
    hits = search_words(wb, "Heatwise boiler serviced")  # searchable by words at once
    assert hits and "Heatwise" in hits[0]["text"]


def test_a_claude_export_reads_text_and_content_blocks(wb, tmp_path):
    turns = [
        ("human", "The roses need pruning in March"),
        ("assistant", "Prune the Gertrude Jekyll"),
    ]
    export = [claude_conversation("u-1", "Garden", turns)]
    path = write_json(tmp_path / "conversations.json", export)
    records, _ = read_records(path)
    assert detect(records) == "claude"
    wb.import_memories(records, format="claude")
    body = wb.store.fetchone("SELECT body FROM episodes")[0]
    assert body == "user: The roses need pruning in March\nassistant: Prune the Gertrude Jekyll"
    reference = wb.store.fetchone("SELECT reference_time FROM episodes")[0]
    assert reference.astimezone(UTC) == datetime(2025, 2, 3, 10, tzinfo=UTC)


def test_the_generic_form_groups_lines_by_conversation_and_cuts_sessions_at_a_gap(wb, tmp_path):
    def line(cid, text, time, role="user", **extra):
        return {"conversation_id": cid, "role": role, "text": text, "time": time, **extra}

    lines = [
        line("a", "I adopted a cat named Miso", "2025-01-01T10:00:00Z"),
        line("b", "Our standup moves to 9:30", "2025-01-01T11:00:00Z", role=None, speaker="Ann"),
        line("a", "Congratulations!", "2025-01-01T10:01:00Z", role="assistant"),
        line("a", "Miso likes the vet now", "2025-01-03T10:00:00Z"),
    ]
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert is_conversations(path)
    report = import_history(HistoryImport.of(wb), str(path), None, "main")
    assert report.format == "jsonl" and report.episodes_created == 3  # a: two sessions
    names = sorted(r[0] for r in wb.store.fetchall("SELECT name FROM episodes"))
    assert names == ["a (part 1/2)", "a (part 2/2)", "b"]
    assert wb.store.fetchone("SELECT body FROM episodes WHERE name = 'b'")[0] == (
        "Ann: Our standup moves to 9:30"
    )
    # the gap rule is a choice: 0 keeps a conversation whole
    conversations, _ = parse(read_records(path)[0], "jsonl")
    assert [len(sessions(c, 0)) for c in conversations] == [1, 1]


def test_the_entities_and_facts_format_is_not_taken_for_conversations(tmp_path):
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps({"type": "entity", "name": "Ann", "text": "x", "role": "y"}) + "\n")
    assert not is_conversations(path)


def test_an_unknown_format_is_a_clear_error(wb):
    with pytest.raises(InvalidInput, match="--format"):
        import_history(HistoryImport.of(wb), [{"foo": 1}], None, "main")


# --- errors by position, nothing twice ----------------------------------------------------------
def test_a_broken_conversation_is_reported_by_position_and_the_rest_imported(wb):
    good = chatgpt_conversation("c-1", "Fine", [("user", "hello there")])
    no_mapping = {"title": "Broken", "id": "c-2"}
    bad_current = chatgpt_conversation("c-3", "Lost", [("user", "x")])
    bad_current["current_node"] = "nowhere"
    report = wb.import_memories([good, no_mapping, bad_current, "not an object"], format="chatgpt")
    assert report["episodes_created"] == 1 and report["error_count"] == 3
    assert report["errors"][0].startswith("conversation 2: missing field 'mapping'")
    assert report["errors"][1].startswith("conversation 3: 'current_node'")
    assert report["errors"][2].startswith("conversation 4: not a JSON object")


def test_a_broken_generic_line_is_reported_by_line_number(wb):
    lines = [json.dumps({"conversation_id": "a", "role": "user", "text": "fine"}), "{oops",
             json.dumps({"conversation_id": "a", "text": "no role"})]  # fmt: skip
    report = wb.import_memories(lines, format="jsonl", first_line=10)
    assert report["episodes_created"] == 1
    assert report["errors"] == ["line 11: not valid JSON; skipped",
                                "line 12: no 'role' or 'speaker'; skipped"]  # fmt: skip


def test_the_same_file_twice_adds_nothing(wb, tmp_path):
    export = [chatgpt_conversation(f"c-{i}", f"T{i}", [("user", f"note {i}")]) for i in range(3)]
    records = read_records(write_json(tmp_path / "c.json", export))[0]
    first = wb.import_memories(records, format="chatgpt")
    again = wb.import_memories(records, format="chatgpt")
    assert (first["episodes_created"], again["episodes_created"]) == (3, 0)
    assert again["episodes_existing"] == 3 and again["passages"] == 0
    assert wb.store.fetchone("SELECT count(*) FROM episodes")[0] == 3
    assert wb.store.fetchone("SELECT count(*) FROM passages")[0] == 3
    # the uuid is the group's, the conversation's and the session's
    assert wb.store.fetchone("SELECT count(*) FROM episodes WHERE uuid = ?",
                             [episode_uuid("main", "c-0", 0)])[0] == 1  # fmt: skip
    other = wb.import_memories(records, format="chatgpt", group_id="g2")
    assert other["episodes_created"] == 3  # another group: its own episodes


# --- extraction: a choice, priced, low priority -------------------------------------------------
def test_without_extract_episodes_are_stored_and_nothing_is_queued(wb):
    wb.import_memories([chatgpt_conversation("c-1", "T", [("user", "hi")])], format="chatgpt")
    assert wb.store.fetchone("SELECT status FROM episodes")[0] == "stored"
    assert wb.store.fetchone("SELECT count(*) FROM queue")[0] == 0


def test_extract_prices_first_then_queues_at_low_priority(wb):
    export = [chatgpt_conversation(f"c-{i}", f"T{i}", [("user", "x " * 200)]) for i in range(4)]
    plan = wb.import_memories(export[:2], format="chatgpt", extract=True, dry_run=True)
    assert plan["dry_run"] and plan["estimate"]["calls"] == 4  # 2 calls an episode
    assert plan["extraction_queued"] == 2
    assert wb.store.fetchone("SELECT count(*) FROM episodes")[0] == 0  # a dry run writes nothing
    wb.import_memories(export[:2], format="chatgpt")  # stored, not extracted
    report = wb.import_memories(export, format="chatgpt", extract=True)
    # the two new ones and the two stored before are queued
    assert report["episodes_created"] == 2 and report["extraction_queued"] == 4
    rows = wb.store.fetchall("SELECT priority, state FROM queue")
    assert len(rows) == 4 and {tuple(r) for r in rows} == {(2, "queued")}
    assert {r[0] for r in wb.store.fetchall("SELECT status FROM episodes")} == {"queued"}
    assert wb.get_queue_status()["depth_by_priority"].get("low") == 4


# --- the vector backlog -------------------------------------------------------------------------
class HeldEmbedder(HashEmbedder):
    """Embeds only once released (a backlog that stays while a test looks at it)."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()

    def embed(self, texts):
        assert self.release.wait(10)
        return super().embed(texts)


def test_the_backlog_is_visible_in_the_queue_status_and_the_metric():
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    embedder = HeldEmbedder()
    with Workbench.open(settings, embedder=embedder, chat=None, clock=ManualClock(T0)) as wb:
        export = [
            chatgpt_conversation(f"c-{i}", f"T{i}", [("user", f"note {i}")]) for i in range(3)
        ]
        wb.import_memories(export, format="chatgpt")
        wb.import_memories(export[:1], format="chatgpt", group_id="g2")
        status = wb.get_queue_status()["passages_without_vector"]
        assert status["passages"] == 4
        assert [(g["group_id"], g["passages"]) for g in status["groups"]] == [
            ("main", 3),
            ("g2", 1),
        ]
        assert wb.metrics.passages_without_vector._value.get() == 4
        embedder.release.set()
        assert wb.passages.flush(timeout=10)
        status = wb.get_queue_status()["passages_without_vector"]
        assert status == {"passages": 0, "rate_per_second": status["rate_per_second"],
                          "estimated_end": None, "groups": []}  # fmt: skip
        assert status["rate_per_second"] > 0
        assert wb.metrics.passages_without_vector._value.get() == 0
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 4
