"""Runs where something goes wrong or drifts: a run-wide step that fails charges nobody
(the group goes one at a time and the culprit fails alone), an episode deleted while its run
is prepared does not leave the later ones pointing at what it made, entity vectors stay as
fresh as one at a time, and an exact name made earlier in the run wins over a similar entity
of the graph. (Reproductions from a review of the runs change.)"""

from __future__ import annotations

import threading

import numpy as np

from tests.ingest.test_pipeline import open_wb
from tests.ingest.test_runs import history
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import structure_name
from workbench.fakes.embedder import HashEmbedder
from workbench.ingest.records import entity_text


def _states(wb):
    return dict(
        wb.store.fetchall(
            "SELECT e.name, q.state FROM queue q JOIN episodes e ON e.uuid = q.episode_uuid"
        )
    )


class PoisonEmbedder(HashEmbedder):
    """Rejects one text (as a remote embedding API rejects an input): a fact text only
    embedded by the final embedding step."""

    def embed(self, texts):
        if any(t == "Tom uses Neovim." for t in texts):
            raise ValueError("the embedding API rejected an input")
        return super().embed(texts)


def _poison_states(fake_llm, run):
    fake_llm.set_responder(rule_llm.respond)
    wb = open_wb(fake_llm, PoisonEmbedder(), SVC_KNOWLEDGE_QUEUE_GROUP_RUN=run)
    try:
        for i, body in enumerate(
            ["Tom works at Acme.", "Tom lives in Berlin.", "Tom uses Neovim.", "Tom leads Atlas."]
        ):
            wb.add_memory(f"e{i}", body, group_id="g", reference_time=f"2024-01-0{i + 1}T00:00:00Z")
        wb.queue.outcomes.base_delay = 0.0
        for _ in range(10):
            wb.queue.drain()
        return _states(wb)
    finally:
        wb.close()


def test_a_run_wide_failure_is_charged_to_the_episode_that_causes_it(fake_llm):
    one = _poison_states(fake_llm, "1")
    assert one == {"e0": "done", "e1": "done", "e2": "failed", "e3": "done"}
    runs = _poison_states(fake_llm, "8")
    assert runs == one, runs


def test_an_episode_deleted_while_its_run_is_prepared_leaves_nothing_dangling(
    fake_llm, hash_embedder
):
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_QUEUE_GROUP_RUN="8")
    first = wb.add_memory(
        "e0", "Tom works at Acme.", group_id="g", reference_time="2024-01-01T00:00:00Z"
    )["episode_uuid"]
    wb.add_memory(
        "e1",
        "Tom uses Python. Tom lives in Berlin.",
        group_id="g",
        reference_time="2024-01-02T00:00:00Z",
    )
    deleted = threading.Event()

    def responder(request):
        text = rule_llm.episode_text(request)
        if (
            "ExtractedEdges" in str(request.get("response_format"))
            and "Tom uses Python" in text
            and not deleted.is_set()
        ):
            deleted.set()
            wb.delete_episode(first)  # a user deletes e0 while the run is prepared
        return rule_llm.respond(request)

    fake_llm.set_responder(responder)
    try:
        wb.queue.drain()
        assert deleted.is_set()
        entities = {u for (u,) in wb.store.fetchall("SELECT uuid FROM entities")}
        facts = wb.store.fetchall("SELECT source_uuid, target_uuid, fact FROM facts")
        mentions = wb.store.fetchall("SELECT entity_uuid FROM mentions")
        dangling_facts = [f for f in facts if f[0] not in entities or f[1] not in entities]
        dangling_mentions = [m for (m,) in mentions if m not in entities]
        names = sorted(n for (n,) in wb.store.fetchall("SELECT name FROM entities"))
        # one at a time: e1 (processed after the delete) creates Tom itself
        assert "Tom" in names and not dangling_facts and not dangling_mentions, (
            names,
            dangling_facts,
            dangling_mentions,
        )
    finally:
        wb.close()


class Recording(HashEmbedder):
    def __init__(self):
        super().__init__()
        self.texts: dict[bytes, str] = {}

    def embed(self, texts):
        out = super().embed(texts)
        for t, v in zip(texts, out):
            self.texts[np.asarray(v, np.float32).tobytes()] = t
        return out


def _tom_staleness(fake_llm, run, count=48):
    fake_llm.set_responder(rule_llm.respond)
    emb = Recording()
    wb = open_wb(fake_llm, emb, SVC_KNOWLEDGE_QUEUE_GROUP_RUN=run)
    try:
        for ep in history(count, seed=11):
            wb.add_memory(**ep)
        wb.process_pending()
        uuid, name, etype, summary = wb.store.fetchone(
            "SELECT uuid, name, entity_type, summary FROM entities WHERE name = 'Tom'"
        )
        row = wb.store.fetchone("SELECT vector FROM entity_embeddings WHERE uuid = ?", [uuid])
        seen_text = emb.texts[np.asarray(row[0], np.float32).tobytes()]
        prefix = entity_text(name, etype, "")
        seen = seen_text[len(prefix) :].strip()
        now = summary.strip()
        # now = (seen + added)[-limit:]: the longest prefix of `now` that ends `seen`
        best = 0
        for k in range(min(len(seen), len(now)), 0, -1):
            if seen.endswith(now[:k]):
                best = k
                break
        return len(now) - best, len(now)
    finally:
        wb.close()


def test_entity_vectors_in_runs_are_as_fresh_as_one_at_a_time(fake_llm):
    unseen_one, total = _tom_staleness(fake_llm, "1")
    unseen_run, total_run = _tom_staleness(fake_llm, "8")
    assert unseen_one < 0.25 * total
    assert unseen_run < 0.25 * total_run, (unseen_run, total_run)


def test_entity_vectors_stay_fresh_with_the_default_run(fake_llm):
    unseen_run, total_run = _tom_staleness(fake_llm, "16", 96)
    assert unseen_run < 0.25 * total_run, (unseen_run, total_run)


LONG = (
    "builds reusable orbital rockets and satellite launch vehicles for commercial "
    "customers from its factory near the coast with engines tested every week by the "
    "propulsion team under strict safety rules and budgets approved yearly"
)


def acme_responder(request):
    name = structure_name(request)
    text = rule_llm.episode_text(request)
    if name == "ExtractedEntities":
        if "[G]" in text:
            ents = [("ACME Inc", LONG)]
        elif "[E0]" in text:
            ents = [("Acme", "zebra quokka")]
        elif "[E1]" in text:
            ents = [("Acme", LONG)]
        else:
            ents = []
        return {
            "entities": [
                {
                    "name": n,
                    "entity_type": "Organization",
                    "summary": s,
                    "importance": 3,
                    "stability": 3,
                }
                for n, s in ents
            ]
        }
    if name == "ExtractedEdges":
        return {"edges": []}
    if name == "NodeResolutions":
        return {"entity_resolutions": []}
    return None


def build_acme(fake_llm, hash_embedder, run):
    fake_llm.set_responder(acme_responder)
    wb = open_wb(fake_llm, hash_embedder, SVC_KNOWLEDGE_QUEUE_GROUP_RUN=run)
    try:
        wb.add_memory("g", "[G] the company", group_id="g", reference_time="2024-01-01T00:00:00Z")
        wb.process_pending()
        wb.add_memory("e0", "[E0] acme one", group_id="g", reference_time="2024-01-02T00:00:00Z")
        wb.add_memory("e1", "[E1] acme two", group_id="g", reference_time="2024-01-03T00:00:00Z")
        wb.process_pending()
        return sorted(
            wb.store.fetchall(
                "SELECT ep.name, en.name FROM mentions m "
                "JOIN episodes ep ON ep.uuid = m.episode_uuid "
                "JOIN entities en ON en.uuid = m.entity_uuid"
            )
        )
    finally:
        wb.close()


def test_an_exact_name_made_earlier_in_the_run_wins_over_a_similar_graph_entity(
    fake_llm, hash_embedder
):
    one = build_acme(fake_llm, hash_embedder, "1")
    runs = build_acme(fake_llm, hash_embedder, "8")
    assert runs == one
