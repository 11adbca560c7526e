"""The tool table is the single source of REST and MCP: it must match the facade and the
design's tool contract."""

from __future__ import annotations

import inspect

import pytest
from pydantic import ValidationError

from service.api.tools import TOOLS, TOOLS_BY_NAME, get_tool
from workbench.errors import NotFound
from workbench.facade import Workbench
from workbench.store.browse import GroupPages

HELD = {"pages": GroupPages}  # the facade's collaborators whose methods are tools

DESIGN_TOOLS = {
    "add_memory",
    "search_memory_nodes",
    "search_memory_facts",
    "search_memory",
    "get_episodes",
    "delete_episode",
    "get_entity_edge",
    "get_sources",
    "get_timeline",
    "delete_entity_edge",
    "clear_graph",
    "get_status",
    "get_queue_status",
    "retry_failed_episodes",
    "run_decay_maintenance",
    "import_memories",
    "export_snapshot",
    "get_knowledge_health",
    "classify_memory",
    "recover_soft_deleted",
    "list_groups",
    "add_token",
    "list_tokens",
    "revoke_token",
    "reextract",
    # browsing a group page by page (the memory browser at /ui)
    "get_group_stats",
    "list_episodes",
    "get_episode",
    "list_facts",
    "list_entities",
    "get_entity",
    "delete_entity",
}


def test_the_table_has_exactly_the_designed_tools():
    assert set(TOOLS_BY_NAME) == DESIGN_TOOLS
    assert len(TOOLS) == len(DESIGN_TOOLS)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_every_argument_is_a_parameter_of_the_facade_method(tool):
    owner, _, name = tool.method.rpartition(".")
    method = getattr(HELD.get(owner, Workbench), name)  # "pages.x": the facade's pages' x
    params = inspect.signature(method).parameters
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    for field in tool.args.model_fields:
        assert field in params or takes_kwargs, f"{tool.name}: {field} not in {method}"
    for name, param in params.items():
        required = param.default is param.empty and param.kind is param.POSITIONAL_OR_KEYWORD
        if name != "self" and required:
            assert tool.args.model_fields[name].is_required(), f"{tool.name}.{name}"


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_schemas_and_descriptions_are_fit_for_an_assistant(tool):
    schema = tool.input_schema()
    assert schema["type"] == "object"
    assert "properties" in schema
    assert len(tool.description) >= 40
    for name, prop in schema["properties"].items():
        assert prop.get("description"), f"{tool.name}.{name} has no description"
    assert not (tool.read_only and tool.destructive)


def test_unknown_and_legacy_arguments():
    search = get_tool("search_memory_nodes")
    with pytest.raises(ValidationError, match="Extra inputs"):
        search.parse({"query": "x", "max_node": 3})
    assert search.parse({"query": "x", "entity": "Person"}).entity_types == ["Person"]
    assert search.parse({"query": "x", "entity": ""}).entity_types is None
    episodes = get_tool("get_episodes").parse({"group_id": "g", "last_n": 3})
    assert episodes.group_ids == ["g"] and episodes.max_episodes == 3
    with pytest.raises(ValidationError):
        get_tool("clear_graph").parse({"group_ids": []})
    with pytest.raises(NotFound, match="add_memory"):
        get_tool("nope")


def test_a_collaborators_method_is_called_on_the_facade_and_by_name_on_a_stand_in():
    from service.api.tools import method_of

    class Pages:
        def list_facts(self, **kwargs):
            return {"pages": kwargs}

    class Facade:
        def __init__(self):
            self.pages = Pages()

    class StandIn:
        def __getattr__(self, method):
            return lambda **kwargs: {method: kwargs}

    assert method_of(Facade(), "pages.list_facts")(group_id="g") == {"pages": {"group_id": "g"}}
    assert method_of(StandIn(), "pages.list_facts")() == {"pages.list_facts": {}}
    assert all(hasattr(GroupPages, t.method.split(".")[1]) for t in TOOLS if "." in t.method)


def test_invoke_passes_only_given_arguments():
    calls = []

    class Recorder:
        def get_episodes(self, **kwargs):
            calls.append(kwargs)
            return {"episodes": []}

    answer = get_tool("get_episodes").invoke(Recorder(), {"group_ids": ["a"]})
    assert answer == {"episodes": [], "groups": ["a"]}  # a list says which groups it covered
    assert calls == [{"group_ids": ["a"], "max_episodes": 10}]
