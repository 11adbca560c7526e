"""The core's boundaries: importing it loads no adapter layer and no heavy model library, its
public API is small, sorted and real, its subsystems import each other in one direction only,
no module of the core, the service or the voice server sits on an import circle, and the two
servers share only the neutral ``serving`` package."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import workbench

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = (
    "litestar",
    "service",
    "voice",
    "uvicorn",
    "mcp",
    "IPython",
    "ipywidgets",
    "torch",
    "sentence_transformers",
    "transformers",
    "onnxruntime",
)

# The direction of imports in the core: a module may import its own layer and those below.
# The pure decay rules sit with the kernel: the store's maintenance SQL is their twin. The
# facade's result types (typed dicts) import nothing of the core.
LAYERS = [
    (
        "kernel",
        (
            "workbench.config",
            "workbench.errors",
            "workbench.clock",
            "workbench.metrics",
            "workbench.names",
            "workbench.safety",
            "workbench.decay.rules",
            "workbench.results",
        ),
    ),
    ("store", ("workbench.store",)),
    ("models", ("workbench.llm", "workbench.prompts", "workbench.embedding")),
    ("index", ("workbench.index",)),
    ("search", ("workbench.search",)),
    ("ingest, decay", ("workbench.ingest", "workbench.decay")),
    ("jobs", ("workbench.jobs",)),
    ("facade", ("workbench.facade", "workbench.__init__")),
    # evaluation and the fakes may import anything; nothing in the core imports them
    ("tools", ("workbench.eval", "workbench.fakes")),
]
MAX_TOP_LEVEL_MODULES = 8


def module_files(package: str) -> dict[str, Path]:
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = {
    m: p
    for pkg in ("workbench", "service", "serving", "voice")
    for m, p in module_files(pkg).items()
}


def imports_of(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (in functions too)."""
    found = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + [base]).strip(".")
            for alias in node.names:
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}


def layer(module: str) -> int:
    if module == "workbench":  # the package's own __init__: the public API over the facade
        module = "workbench.__init__"
    best = (-1, None)
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best[0]:
                best = (len(prefix), rank)
    assert best[1] is not None, f"{module} belongs to no layer: add it to LAYERS"
    return best[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_sits_on_an_import_circle():
    assert cycles(GRAPH) == []


def test_the_cycle_finder_finds_a_circle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_the_core_imports_downwards_only():
    upward = [
        f"{module} ({LAYERS[layer(module)][0]}) imports {target} ({LAYERS[layer(target)][0]})"
        for module, targets in GRAPH.items()
        if module.startswith("workbench")
        for target in targets
        if layer(target) > layer(module)
    ]
    assert upward == []


# Writers reach the live indexes through their publisher, never through the search engine:
# ingestion, maintenance and the whole-graph jobs import nothing of ``workbench.search`` (which
# only answers queries).
APART = [(("workbench.ingest", "workbench.decay", "workbench.jobs"), ("workbench.search",))]


def through_search(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        for writers, readers in APART
        if module.startswith(writers) and target.startswith(readers)
    )


def test_ingest_and_decay_reach_the_indexes_without_the_search_engine():
    assert through_search(GRAPH) == []


def test_the_apart_rule_would_catch_ingest_importing_the_search_engine():
    graph = {"workbench.jobs.reextract": {"workbench.search.engine", "workbench.index.live"}}
    assert through_search(graph) == [("workbench.jobs.reextract", "workbench.search.engine")]


def test_the_core_imports_neither_the_service_nor_the_voice_server():
    crossing = [
        (m, t)
        for m, targets in GRAPH.items()
        if m.startswith("workbench")
        for t in targets
        if not t.startswith("workbench")
    ]
    assert crossing == []


# The two servers: the neutral ``serving`` package (guards, errors, request logs, API docs,
# version) is what they share; neither imports the other, and ``serving`` imports neither.
SERVERS = {"service": ("service", "voice"), "voice": ("service",), "serving": ("service", "voice")}


def crossings(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        for package, forbidden in SERVERS.items()
        if module.split(".")[0] == package
        for other in forbidden
        if other != package and target.split(".")[0] == other
    )


def test_the_servers_share_only_the_neutral_serving_package():
    assert crossings(GRAPH) == []


def test_the_server_rule_would_catch_the_voice_server_importing_the_service():
    graph = {"voice.server": {"service.control.bootstrap"}, "serving.errors": {"voice.errors"}}
    assert crossings(graph) == [
        ("serving.errors", "voice.errors"),
        ("voice.server", "service.control.bootstrap"),
    ]


@pytest.mark.parametrize(
    "module, target",
    [
        ("workbench.store.graph", "workbench.search.engine"),
        ("workbench.search.engine", "workbench.ingest.write"),
        ("workbench.index.live", "workbench.search.searcher"),
        ("workbench.ingest.extract", "workbench.facade"),
        ("workbench.facade", "workbench.eval.retrieval"),
        ("workbench.safety", "workbench.store"),
    ],
)
def test_the_layer_rule_would_catch_an_upward_import(module, target):
    assert layer(target) > layer(module)


def test_every_module_of_the_core_has_a_layer():
    for module in MODULES:
        if module.startswith("workbench"):
            layer(module)  # asserts


def test_at_most_eight_modules_at_the_top_of_the_core():
    top = sorted(p.name for p in (ROOT / "workbench").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= MAX_TOP_LEVEL_MODULES, top


def test_importing_the_core_loads_no_adapter_and_no_model_library():
    code = (
        "import sys, workbench, workbench.facade, workbench.search, workbench.decay.maintenance, "
        "workbench.llm, workbench.ingest.pipeline, workbench.jobs.importer\n"
        f"print([m for m in {FORBIDDEN!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# The live client (the CLI, notebooks) starts without the servers' web stack: what it shares
# with them comes from serving's leaf modules (``serving.addresses``), never the middleware.
SERVER_STACK = ("litestar", "uvicorn", "mcp")


def loaded_server_stack(module: str) -> list[str]:
    """The modules of ``SERVER_STACK`` that importing ``module`` loads (in a fresh process)."""
    code = f"import sys, {module}\nprint([m for m in {SERVER_STACK!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return ast.literal_eval(out.stdout.strip())


def test_importing_the_live_client_loads_no_web_stack():
    assert loaded_server_stack("service.client.live") == []


def test_the_web_stack_rule_would_catch_the_middleware():
    assert "litestar" in loaded_server_stack("serving.middleware")


def test_the_public_api_is_sorted_and_importable():
    assert workbench.__all__ == sorted(workbench.__all__)
    for name in workbench.__all__:
        assert getattr(workbench, name) is not None
