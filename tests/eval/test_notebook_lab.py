"""The notebooks' offline LLM (notebooks/lab.py) reads the real prompts correctly.

Requests are built with the real prompt builders and request options, so a change of a prompt
format that would silently empty the notebooks' recorded answers fails here, in milliseconds.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime
from pathlib import Path

import pytest

from workbench.eval.extraction import loose_name_key
from workbench.llm.structured import request_options
from workbench.prompts import classify_memories, extract_edges, extract_entities, resolve_nodes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lab():
    spec = importlib.util.spec_from_file_location("notebook_lab", ROOT / "notebooks" / "lab.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def labelled(lab):
    return {ep.id: ep for ep in lab.labelled_set()}


def request(messages, model, mode="json_schema"):
    msgs, extra = request_options(mode, messages, model)
    return {"model": "m", "messages": msgs, **extra}


def episode(ep):
    return {
        "uuid": "u",
        "name": ep.name,
        "body": ep.episode_body,
        "source": ep.source,
        "source_description": ep.source_description,
        "group_id": ep.group_id,
        "reference_time": datetime.fromisoformat(ep.reference_time.replace("Z", "+00:00")),
    }


def answer(responder, req):
    reply = responder(req)
    assert reply is not None
    return reply.data, reply.cached_tokens


@pytest.mark.parametrize("mode", ["json_schema", "json_object", "tool"])
def test_entities_answer_is_the_gold(lab, labelled, mode):
    ep = labelled["alex-08"]
    responder = lab.LabelledResponder(list(labelled.values()))
    req = request(
        extract_entities.build_messages(episode(ep), []), extract_entities.ExtractedEntities, mode
    )
    data, _ = answer(responder, req)
    assert [e["name"] for e in data["entities"]] == [e.name for e in ep.gold.entities]
    extract_entities.ExtractedEntities.model_validate(data)


def test_edges_answer_uses_listed_names_and_invalidates(lab, labelled):
    ep = labelled["alex-08"]
    listed = [{"name": e.name, "entity_type": e.entity_type} for e in ep.gold.entities]
    existing = [
        {"source_name": "Alex Morgan", "relation": "USES", "target_name": "Python", "fact": "x"},
        {
            "source_name": "Alex Morgan",
            "relation": "USES",
            "target_name": "VS Code",
            "fact": "Alex Morgan does all their coding in VS Code.",
        },
    ]
    req = request(
        extract_edges.build_messages(episode(ep), listed, existing), extract_edges.ExtractedEdges
    )
    data, _ = answer(lab.LabelledResponder(list(labelled.values())), req)
    parsed = extract_edges.ExtractedEdges.model_validate(data)
    current = [f for f in ep.gold.facts if not f.ended]
    assert [(e.source, e.relation, e.target) for e in parsed.edges] == [
        (f.source, f.relation, f.target) for f in current
    ]
    assert parsed.edges[0].invalidates == [2]


def test_edges_skip_endpoints_not_listed(lab, labelled):
    ep = labelled["alex-01"]
    listed = [
        {"name": "Alex Morgan", "entity_type": "Person"},
        {"name": "Portland", "entity_type": "Place"},
    ]
    req = request(
        extract_edges.build_messages(episode(ep), listed, []), extract_edges.ExtractedEdges
    )
    data, _ = answer(lab.LabelledResponder(list(labelled.values())), req)
    assert [(e["source"], e["target"]) for e in data["edges"]] == [("Alex Morgan", "Portland")]


def test_degraded_responder_drops_and_renames(lab, labelled):
    ep = labelled["alex-01"]
    listed = [{"name": e.name, "entity_type": e.entity_type} for e in ep.gold.entities]
    req = request(
        extract_edges.build_messages(episode(ep), listed, []), extract_edges.ExtractedEdges
    )
    good, _ = answer(lab.LabelledResponder(list(labelled.values())), req)
    bad, _ = answer(lab.LabelledResponder(list(labelled.values()), drop_every=4), req)
    assert len(bad["edges"]) < len(good["edges"])
    assert any(e["relation"] == "RELATES_TO" for e in bad["edges"])


def test_resolutions_match_by_normalised_name(lab, labelled):
    questions = [
        {
            "id": 1,
            "name": "alex morgan",
            "entity_type": "Person",
            "summary": "s",
            "candidates": [
                {"id": 7, "name": "Alex Morgan", "entity_type": "Person", "summary": "t"}
            ],
        },
        {
            "id": 2,
            "name": "Neovim",
            "entity_type": "Tool",
            "summary": "s",
            "candidates": [{"id": 8, "name": "LazyVim", "entity_type": "Tool", "summary": "t"}],
        },
    ]
    req = request(resolve_nodes.build_messages(questions), resolve_nodes.NodeResolutions)
    data, _ = answer(lab.LabelledResponder(list(labelled.values())), req)
    assert data == {
        "entity_resolutions": [{"id": 1, "duplicate_of": 7}, {"id": 2, "duplicate_of": None}]
    }


def test_classifications_one_per_memory(lab, labelled):
    req = request(
        classify_memories.build_messages(["a", "b", "c"]), classify_memories.MemoryClassifications
    )
    data, _ = answer(lab.LabelledResponder(list(labelled.values())), req)
    assert [c["index"] for c in data["classifications"]] == [1, 2, 3]


def test_unknown_structure_falls_through(lab, labelled):
    assert lab.LabelledResponder([])({"messages": []}) is None


def test_cache_only_for_long_repeated_system_prompts(lab):
    responder = lab.LabelledResponder([])
    short = {"messages": [{"role": "system", "content": "x" * 100}]}
    long = {"messages": [{"role": "system", "content": "y" * 5000}]}
    assert responder._cached(short) == responder._cached(short) == 0
    assert responder._cached(long) == 0
    assert responder._cached(long) == len(json.dumps(long["messages"])) // 4


def test_llm_mode_selection(lab, monkeypatch):
    monkeypatch.setenv("WORKBENCH_NOTEBOOK_LLM", "recorded")
    assert lab.llm_mode() == "recorded"
    assert lab.llm_mode("configured") == "configured"
    with pytest.raises(ValueError):
        lab.llm_mode("cloud")


def test_gold_names_survive_normalisation(labelled):
    for ep in labelled.values():
        keys = [loose_name_key(e.name) for e in ep.gold.entities]
        assert all(keys), ep.id
