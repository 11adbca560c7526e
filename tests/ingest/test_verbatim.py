"""The passage writer's embedding: a short episode embedded before ``add_memory`` returns
(found by meaning at once), live passages before a bulk backlog, the groups of a backlog in
turns (one group's backlog does not starve another's), a stop that does not wait for a backlog,
and the drain-time estimate (pure)."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

from workbench.clock import ManualClock
from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes.embedder import HashEmbedder
from workbench.ingest.backlog import Lanes, drain_times
from workbench.ingest.context import IngestContext
from workbench.ingest.verbatim import INLINE_PASSAGES, PassageWriter

T0 = datetime(2026, 3, 1, 12, tzinfo=UTC)


def settings(**env):
    return load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:", **env}, env_file=None)


class SlowEmbedder(HashEmbedder):
    """A hash embedder that takes ``delay`` seconds a call and records each call's texts."""

    def __init__(self, delay: float = 0.0):
        super().__init__()
        self.delay = delay
        self.batches: list[list[str]] = []
        self.lock = threading.Lock()

    def embed(self, texts):
        time.sleep(self.delay)
        with self.lock:
            self.batches.append(list(texts))
        return super().embed(texts)


def rows(group: str, n: int, start: int = 0) -> list[dict]:
    return [{"uuid": f"{group}-{i}", "group_id": group, "text": f"{group} text {i}"}
            for i in range(start, start + n)]  # fmt: skip


# --- pure ---------------------------------------------------------------------------------------
def test_drain_times_follow_the_turns_of_the_groups():
    assert drain_times({"a": 100, "b": 10}, 10.0) == {"a": 11.0, "b": 2.0}
    assert drain_times({"a": 5}, None) == {"a": None}


def test_live_passages_go_before_bulk_ones_and_groups_take_turns():
    lanes = Lanes()
    lanes.add(rows("big", 1000), live=False)
    lanes.add(rows("small", 10), live=False)
    lanes.add(rows("live", 3), live=True)
    batch, live = lanes.take(64, 256)
    assert live and [r["group_id"] for r in batch] == ["live"] * 3
    batch, live = lanes.take(64, 64)
    assert not live and len(batch) == 64
    assert sum(r["group_id"] == "small" for r in batch) == 10  # all of the small group's
    assert lanes.counts() == {"big": 946}


# --- the writer ---------------------------------------------------------------------------------
def test_a_short_episode_is_found_by_meaning_when_add_memory_returns():
    embedder = SlowEmbedder()
    with Workbench.open(settings(), embedder=embedder, chat=None, clock=ManualClock(T0)) as wb:
        assert wb.passages.inline == INLINE_PASSAGES
        out = wb.add_memory("s", "Ann: I adopted a cat named Miso.", source="message")
        # no wait: the vector is stored and indexed before add_memory returned
        stored = wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0]
        assert stored == 1 and wb.passages.waiting() == 0
        [hit] = wb.search_memory("Ann adopted a cat named Miso", kinds=["passage"])["results"]
        assert hit["episode_uuid"] == out["episode_uuid"] and hit["score_parts"]["similarity"] > 0


def test_inline_embedding_is_a_setting():
    held = settings(SVC_KNOWLEDGE_INLINE_PASSAGES="0")
    with Workbench.open(held, embedder=SlowEmbedder(0.3), chat=None, clock=ManualClock(T0)) as wb:
        wb.add_memory("s", "Ann: I adopted a cat named Miso.", source="message")
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 0
        assert wb.passages.flush(timeout=10)
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 1


def test_a_long_episode_is_embedded_by_the_thread_after_add_memory():
    embedder = SlowEmbedder(delay=0.3)
    body = "\n".join(f"P{i}: " + "word " * 100 for i in range(30))
    with Workbench.open(settings(), embedder=embedder, chat=None, clock=ManualClock(T0)) as wb:
        wb.add_memory("long", body, source="message")
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] == 0
        assert wb.passages.flush(timeout=10)
        assert wb.store.fetchone("SELECT count(*) FROM passage_embeddings")[0] > INLINE_PASSAGES


def test_a_remote_embedder_is_never_waited_for_in_add_memory():
    remote = settings(SVC_KNOWLEDGE_EMBEDDER_BASE_URL="http://127.0.0.1:9/v1")
    ctx = IngestContext(None, None, None, embedder=HashEmbedder(), publisher=object(),  # type: ignore[arg-type]
                        settings=remote)  # fmt: skip
    assert PassageWriter.of(ctx).inline == 0


def test_one_groups_backlog_does_not_starve_another_group():
    embedder = SlowEmbedder(delay=0.05)
    with Workbench.open(settings(), embedder=embedder, chat=None, clock=ManualClock(T0)) as wb:
        big = [f"conversation {i}" for i in range(40)]
        wb.import_memories(
            [{"conversation_id": c, "role": "user", "text": f"{c} about boats"} for c in big],
            format="jsonl", group_id="big",
        )  # fmt: skip
        wb.import_memories(
            [{"conversation_id": "x", "role": "user", "text": "small one"}],
            format="jsonl", group_id="small",
        )  # fmt: skip
        assert wb.passages.flush(timeout=20)
    # the small group's passage is in the first or second call, not after the 40
    first = [i for i, call in enumerate(embedder.batches) if any("small one" in t for t in call)]
    assert first and first[0] <= 1


def test_a_stop_does_not_wait_for_a_backlog_and_the_next_start_embeds_it(tmp_path):
    db = str(tmp_path / "m.duckdb")
    embedder = SlowEmbedder(delay=1.0)
    wb = Workbench.open(settings(SVC_KNOWLEDGE_DB_PATH=db), embedder=embedder, chat=None)
    lines = [{"conversation_id": f"c{i}", "role": "user", "text": f"note {i}"} for i in range(2000)]
    wb.import_memories(lines, format="jsonl")
    started = time.monotonic()
    wb.close()  # 2,000 passages at 1 s a call of 64: the close ends after one call
    assert time.monotonic() - started < 4.0
    with Workbench.open(settings(SVC_KNOWLEDGE_DB_PATH=db), embedder=HashEmbedder(),
                        chat=None) as again:  # fmt: skip
        left = again.get_queue_status()["passages_without_vector"]["passages"]
        assert 0 < left < 2000
        again.start()
        assert again.passages.flush(timeout=20)
        assert again.get_queue_status()["passages_without_vector"]["passages"] == 0
