"""The notebooks' pictures of a user's own memories (notebooks/memories.py) on a real
workbench: episodes extracted by the rule-based fake LLM over the real chat-completions wire,
read back through a snapshot of the tables as ``lab.live_tables()`` gives them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import matplotlib
import pytest

from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.fakes import rule_llm
from workbench.fakes.chat_server import chat_settings_env

matplotlib.use("Agg")
ROOT = Path(__file__).resolve().parents[2]
EPISODES = [
    ("Maria Keller works at Acme.", "work", "2026-01-05T09:00:00Z"),
    ("Maria Keller lives in Berlin.", "home", "2026-01-05T10:00:00Z"),
    ("Maria Keller uses Python.", "work", "2026-01-06T09:00:00Z"),
    ("Maria Keller moved to Munich.", "home", "2026-01-07T18:00:00Z"),
    ("Tom works at Acme.", "work", "2026-01-07T19:00:00Z"),
]


def load(name: str):
    spec = importlib.util.spec_from_file_location(
        f"notebook_{name}", ROOT / "notebooks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def memories():
    return load("memories")


@pytest.fixture
def tables(fake_llm, hash_embedder):
    fake_llm.model = "gpt-4o-mini"  # priced: the calls cost USD
    fake_llm.set_responder(rule_llm.respond)
    env = chat_settings_env(fake_llm, SVC_KNOWLEDGE_DB_PATH=":memory:")
    with Workbench.open(load_settings(env, env_file=None), embedder=hash_embedder) as wb:
        for number, (body, group, when) in enumerate(EPISODES):
            wb.add_memory(f"note {number}", body, group_id=group, reference_time=when)
        assert wb.process_pending() == len(EPISODES)
        con = load("lab").tables_of(wb)
        yield con, wb
        con.close()


def test_the_graph_around_an_entity_keeps_what_is_still_true(memories, tables):
    con, _ = tables
    graph = memories.entity_graph(con, "maria keller")  # any case
    assert set(graph.successors("Maria Keller")) == {"Acme", "Munich", "Python"}
    assert graph.edges["Maria Keller", "Munich"]["relation"] == "LIVES_IN"
    everything = memories.entity_graph(con, "Maria Keller", current=False)
    assert "Berlin" in everything
    assert "Tom" not in graph and "Tom" in memories.entity_graph(con, "Maria Keller", depth=2)
    assert memories.draw_graph(graph).get_title() == "Facts around maria keller"


def test_a_name_that_is_no_entity_says_which_exist(memories, tables):
    con, _ = tables
    with pytest.raises(ValueError, match="no entity named 'Nobody'.*Acme"):
        memories.entity_graph(con, "Nobody")


def test_the_timeline_shows_episodes_and_facts_over_their_validity(memories, tables):
    con, _ = tables
    events = memories.timeline(con, "Maria Keller")
    episodes = events[events.kind == "episode"]
    assert len(episodes) == 4 and "note 4" not in set(episodes.label)  # Tom's is not hers
    berlin = events[events.label.str.contains("Berlin")].iloc[0]
    assert str(berlin.start.date()) == "2026-01-05"  # when the episode told it
    assert str(berlin.end.date()) == "2026-01-07"  # until she moved
    munich = events[events.label.str.contains("Munich")].iloc[0]
    assert munich.end is None or str(munich.end) == "NaT"
    ax = memories.draw_timeline(events)
    assert len(ax.get_yticklabels()) == 1 + (events.kind == "fact").sum()


def test_decay_states_and_cost_per_group_and_day(memories, tables):
    con, wb = tables
    states = memories.decay_states(con)
    assert states.loc["ACTIVE", "facts"] == con.sql("SELECT count(*) FROM facts").fetchone()[0]
    cost = memories.cost_per_group_day(con)
    assert {"home", "work"} <= set(cost.columns)
    total = con.sql("SELECT sum(total_cost) FROM llm_calls").fetchone()[0]
    assert total > 0 and abs(cost.to_numpy().sum() - total) < 1e-12
    memories.draw_decay(con)
    assert memories.draw_cost(cost).get_title().startswith("LLM cost per day")


def test_the_search_box_shows_what_the_search_finds(memories, tables):
    _, wb = tables
    asked = []

    def search(query):
        asked.append(query)
        return wb.search_memory_facts(query, max_facts=3)["facts"]

    box = memories.SearchBox(search, columns=["fact", "score"])
    found = box.run("where does Maria live")
    assert list(found.columns) == ["fact", "score"] and len(found) > 0
    assert "Maria Keller lives in Munich." in set(found.fact)
    box.text.value = "Acme"  # typing and pressing Enter runs the same search
    assert asked == ["where does Maria live", "Acme"]
    assert box.run("   ").empty and len(asked) == 2
    shown = len(box.output.outputs)
    table = box.results("Acme")  # the table alone, for a page that draws no widget
    assert list(table.columns) == ["fact", "score"] and len(table) > 0
    assert len(box.output.outputs) == shown and asked[-1] == "Acme"


def test_the_exploration_notebook_shows_its_search_results_without_widgets():
    """A page rendered from the stored notebook (the docs) draws no widget: the search cell
    keeps its results as a plain table beside the box."""
    import json

    cells = json.loads((ROOT / "notebooks" / "exploration.ipynb").read_text())["cells"]
    (cell,) = [c for c in cells if "memories.SearchBox(" in "".join(c["source"])]
    plain = [o for o in cell["outputs"] if "text/html" in o.get("data", {})]
    assert plain and "<table" in "".join(plain[0]["data"]["text/html"])
    assert "application/vnd.jupyter.widget-view+json" not in plain[0]["data"]
