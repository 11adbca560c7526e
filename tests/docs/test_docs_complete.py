"""The docs are tested against the code: every setting, metric, CLI command, tool and endpoint
appears in docs/, the generated reference tables are current, and the site builds strictly."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Registered on first use only (spec rule: series appear after the first call), so a fresh
# Metrics() registry does not hold them. Listed here so that they are checked regardless.
LAZY_METRICS = (
    "graph_prompt_tokens_all_models_total",
    "graph_completion_tokens_all_models_total",
    "graph_total_tokens_all_models_total",
    "graph_api_cost_all_models_total",
    "graph_api_input_cost_all_models_total",
    "graph_api_output_cost_all_models_total",
    "graph_cache_cost_saved_all_models_total",
    "graph_cache_tokens_saved_all_models_total",
    "graph_cache_write_tokens_all_models_total",
    "graph_cache_requests_total",
    "graph_llm_errors_all_models_total",
    "graph_episodes_processed_all_groups_total",
)

# The tool names of the team brief (Graphiti names plus ours), used when service/ is absent.
BRIEF_TOOLS = (
    "add_memory",
    "search_memory_nodes",
    "search_memory_facts",
    "get_episodes",
    "delete_episode",
    "get_entity_edge",
    "delete_entity_edge",
    "clear_graph",
    "get_status",
    "get_queue_status",
    "retry_failed_episodes",
    "run_decay_maintenance",
    "get_knowledge_health",
    "classify_memory",
    "recover_soft_deleted",
)

ENDPOINTS = (
    "/tools/",
    "/mcp",
    "/health",
    "/schema",
    "/metrics",
    "/health/decay",
    "/v1/embeddings",
    "/v1/models",
    "/notify",
)


@cache
def docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md")))


@cache
def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def mentioned(name: str, text: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", text) is not None


def missing(names, text: str) -> list[str]:
    return sorted(n for n in names if not mentioned(n, text))


@cache
def generator():
    spec = importlib.util.spec_from_file_location("docs_reference", DOCS / "_gen" / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- settings ---------------------------------------------------------------------------
def setting_env_names() -> list[str]:
    from workbench.config import ENV_PREFIX, Settings

    names = []
    for field_name, field in Settings.model_fields.items():
        alias = field.validation_alias
        names.append(alias if isinstance(alias, str) else ENV_PREFIX + field_name.upper())
    return names


def test_every_setting_is_documented():
    names = setting_env_names()
    assert "LOG_LEVEL" in names and "SVC_KNOWLEDGE_DB_PATH" in names
    assert missing(names, page("configuration.md")) == []


def test_spec_settings_in_the_spec_order():
    text = page("configuration.md")
    spec = [
        "SVC_KNOWLEDGE_LLM_PROVIDER",
        "SVC_KNOWLEDGE_MODEL_NAME",
        "SVC_KNOWLEDGE_COMPAT_BASE_URL",
        "SVC_KNOWLEDGE_COMPAT_API_KEY",
        "SVC_KNOWLEDGE_EMBEDDER_PROVIDER",
        "SVC_KNOWLEDGE_EMBEDDER_BASE_URL",
        "SVC_KNOWLEDGE_EMBEDDER_MODEL",
        "SVC_KNOWLEDGE_EMBEDDER_DIMENSIONS",
        "SVC_KNOWLEDGE_PROMPT_CACHE_METRICS_ENABLED",
        "SVC_KNOWLEDGE_PROMPT_CACHE_LOG_REQUESTS",
        "SVC_KNOWLEDGE_PROMPT_CACHE_ENABLED",
        "LOG_LEVEL",
    ]
    positions = [text.index(f"| `{name}` |") for name in spec]
    assert positions == sorted(positions)


def test_deployment_modes_have_env_snippets():
    text = page("deployment.md")
    for mode in ("Hybrid", "Hosted", "Full local"):
        assert f"## {mode}" in text
    snippets = re.findall(r"```dotenv\n(.*?)```", text, re.S)
    assert len(snippets) >= 3
    known = set(setting_env_names())
    for snippet in snippets:
        for line in snippet.splitlines():
            if line.strip() and not line.startswith("#"):
                assert line.split("=", 1)[0] in known, line


def test_env_snippets_load_as_settings():
    from workbench.config import load_settings

    for snippet in re.findall(r"```dotenv\n(.*?)```", page("deployment.md"), re.S):
        env = dict(
            line.split("=", 1)
            for line in snippet.splitlines()
            if line.strip() and not line.startswith("#")
        )
        settings = load_settings(environ=env)
        if "SVC_KNOWLEDGE_COMPAT_BASE_URL" in env and "SVC_KNOWLEDGE_MODEL_NAME" in env:
            assert settings.llm_configured


# --- metrics ----------------------------------------------------------------------------
def registered_metric_names() -> set[str]:
    """Every family a fresh ``Metrics()`` registers, under its exposed name."""
    from workbench.metrics import Metrics

    metrics = Metrics(enabled=True, cache_enabled=True)
    names = set()
    # prometheus_client has no public list of a registry's collectors
    for collector in list(metrics.registry._collector_to_names):  # noqa: SLF001
        if not hasattr(collector, "_name"):  # process_*/python_*: prometheus_client's own
            continue
        name = collector._name  # noqa: SLF001
        names.add(name + "_total" if type(collector).__name__ == "Counter" else name)
    return names


def test_every_registered_metric_is_documented():
    names = registered_metric_names()
    assert len(names) >= 50
    assert missing(names, page("metrics.md")) == []


def test_every_lazy_metric_is_documented():
    assert missing(LAZY_METRICS, page("metrics.md")) == []


def test_lazy_list_is_complete():
    """Exercising every recording method registers nothing beyond eager + LAZY_METRICS."""
    exercised = {row["name"] for row in generator().metric_rows()}
    assert exercised - registered_metric_names() == set(LAZY_METRICS)


def test_histogram_buckets_are_documented():
    text = page("metrics.md")
    for row in generator().metric_rows():
        if row["type"] == "histogram":
            line = next(x for x in text.splitlines() if x.startswith(f"| `{row['name']}` |"))
            assert generator()._bucket_text(row["buckets"]) in line, row["name"]


# --- CLI --------------------------------------------------------------------------------
def cli_parsers() -> dict:
    if not (ROOT / "service" / "control" / "cli.py").exists():
        pytest.skip("service/control/cli.py does not exist yet")
    return generator().cli_commands()


def test_every_cli_subcommand_is_documented():
    commands = cli_parsers()
    expected = {"serve", "mcp", "embed-server", "maintenance", "import", "export", "status"}
    assert expected <= set(commands)
    text = page("cli.md")
    for name in commands:
        assert f"workbench {name}" in text, name


def command_sections(text: str) -> dict[str, str]:
    """The ``### `command``` sections of a page: title -> its text up to the next heading."""
    parts = re.split(r"^### `([^`]+)`\n", text, flags=re.M)
    return {title: body.split("\n## ", 1)[0] for title, body in zip(parts[1::2], parts[2::2])}


def test_every_cli_flag_is_documented_in_its_own_command_section():
    """Each command (``tokens add`` as well as ``tokens``, and ``voice-server``) has its
    section, naming every flag its parser takes: a flag on one command does not document the
    same flag missing from another's section."""
    sections = command_sections(page("cli.md"))
    parsers = {f"workbench {name}": parser for name, parser in cli_parsers().items()}
    parsers["voice-server"] = generator().voice_parser()
    assert {"workbench tokens add", "workbench tokens revoke"} <= set(parsers)
    for title, parser in parsers.items():
        assert title in sections, f"no section `{title}` in cli.md"
        for action in parser._actions:  # noqa: SLF001
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert mentioned(option, sections[title]), f"{title} {option}"


def test_command_sections_would_catch_a_flag_documented_elsewhere_only():
    text = "### `a`\n| `--db` |\n### `b`\n| `--model` |\n## Notes\n`--db` again\n"
    sections = command_sections(text)
    assert mentioned("--db", sections["a"]) and not mentioned("--db", sections["b"])


def test_the_top_level_flags_are_documented():
    from service.control.cli import build_parser

    text = page("cli.md")
    for action in build_parser()._actions:  # noqa: SLF001
        for option in action.option_strings:
            if option not in ("-h", "--help"):
                assert f"workbench {option}" in text, option


def test_reembed_is_documented_as_covering_passages():
    """``workbench reembed`` embeds passages too (what search_memory finds): the prose says
    so, not only the generated reference."""
    text = page("cli.md").split("## Reference", 1)[0]
    (row,) = [line for line in text.splitlines() if line.startswith("| `workbench reembed`")]
    note = text.split("- **`workbench reembed`**", 1)[1].split("\n- ", 1)[0]
    assert "passage" in row and "passage" in note


def test_voice_server_command_is_documented():
    text = page("cli.md")
    assert "voice-server" in text and "8888" in text


# --- tools and endpoints ----------------------------------------------------------------
def tool_table():
    try:
        from service.api.tools import TOOLS
    except ImportError:
        return None
    return TOOLS


def test_every_tool_is_documented():
    tools = tool_table()
    names = [t.name for t in tools] if tools else list(BRIEF_TOOLS)
    assert set(BRIEF_TOOLS) <= set(names)
    assert missing(names, page("tools.md")) == []


def test_every_tool_argument_is_documented():
    tools = tool_table()
    if tools is None:
        pytest.skip("service/api/tools.py is not importable")
    text = page("tools.md")
    for tool in tools:
        section = text.split(f"### `{tool.name}`", 1)[1].split("\n### ", 1)[0]
        for arg in tool.args.model_fields:
            assert f"| `{arg}` |" in section, f"{tool.name}({arg})"


def test_every_endpoint_is_documented():
    text = page("endpoints.md")
    for path in ENDPOINTS:
        assert path in text, path
    for port in ("8000", "9090", "9091", "8001", "8888"):
        assert port in text, port


# --- the other pages --------------------------------------------------------------------
def test_troubleshooting_covers_the_spec_errors():
    text = page("troubleshooting.md")
    for needle in (
        "NodeResolutions",
        "ExtractedEntities",
        "ExtractedEdges",
        "entity_resolutions",
        "schema",
        "truncated",
        "refused",
        "compat",
        "fallback",
        "failure",
        "ConnectionError",
        "ValidationError",
        "TimeoutError",
        "RateLimitError",
        "UnknownError",
    ):
        assert needle.lower() in text.lower(), needle


def test_decay_page_has_formula_and_lifecycle_table():
    text = page("decay.md")
    assert "1 − 0.5 ** (days_since_last_access / half_life)" in text
    for state in ("ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "PERMANENT"):
        assert state in text
    assert "importance ≥ 4 and stability ≥ 4" in text


def test_operations_page_names_the_alerts_and_files():
    text = page("operations.md")
    for alert in (
        "MaintenanceTimeout",
        "MaintenanceFailed",
        "ClassificationDegraded",
        "ExcessiveExpiration",
        "SoftDeleteBacklog",
    ):
        assert alert in text
    for path in (
        "ops/prometheus/prometheus.yml",
        "ops/prometheus/alerts.yml",
        "ops/grafana/dashboard.json",
    ):
        assert path in text
        if not (ROOT / path).exists():
            pytest.skip(f"{path} not written yet")


def test_alert_names_match_the_rules_file():
    rules = ROOT / "ops" / "prometheus" / "alerts.yml"
    if not rules.exists():
        pytest.skip("ops/prometheus/alerts.yml not written yet")
    names = re.findall(r"^\s*- alert:\s*(\S+)", rules.read_text(encoding="utf-8"), re.M)
    assert names and missing(names, page("operations.md")) == []


def test_every_data_table_is_documented():
    from workbench.store import TABLES

    assert missing([f"`{t}`" for t in TABLES], page("data-model.md")) == []


@pytest.mark.duckdb_only("the data model page shows the DuckDB file's column types")
def test_generated_blocks_are_current(capsys):
    code = generator().main(["--check"])
    assert code == 0, capsys.readouterr().out


# --- navigation and build ---------------------------------------------------------------
def nav_pages() -> list[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text.split("\nnav:", 1)[1]
    return re.findall(r":\s*([\w./-]+\.md)\s*$", nav, re.M)


def test_nav_and_pages_agree():
    pages = nav_pages()
    files = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "_gen" not in p.parts}
    assert files - set(pages) == set()
    absent = set(pages) - files
    assert absent <= {"voice.md"}, absent


def test_every_notebook_is_in_the_nav():
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "mkdocs-jupyter" in text and (DOCS / "notebooks").resolve() == ROOT / "notebooks"
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        assert f"notebooks/{path.name}" in text, path.name


def test_voice_page_exists():
    if not (DOCS / "voice.md").exists():
        pytest.skip("docs/voice.md (voice work) not written yet; its nav entry is in place")
    assert "/notify" in page("voice.md")


def test_no_build_time_fetching_plugins():
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    plugins = text.split("\nplugins:", 1)[1].split("\n\n", 1)[0]
    for name in ("social", "privacy", "optimize", "git-revision", "git-committers"):
        assert name not in plugins
    assert "font: false" in text


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        pytest.skip("mkdocs is not installed")
    result = subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "site" / "configuration" / "index.html").exists()


def test_labelled_vocabulary_is_documented():
    from workbench.eval.extraction import load_labelled
    from workbench.prompts import ENTITY_TYPES

    labelled = load_labelled(ROOT / "data" / "extraction_labelled.jsonl")
    relations = {f.relation for ep in labelled for f in ep.gold.facts}
    text = page("scoring.md")
    assert missing(relations, text) == []
    assert missing(ENTITY_TYPES, text) == []


def test_the_mcp_client_configurations_have_the_shape_clients_read():
    """The quickstart's ready-to-paste MCP entries: JSON that parses, a stdio entry with an
    absolute command and ``mcp`` (the database, when its environment names one, an absolute
    path; else the per-user one), an HTTP entry at /mcp."""
    import json
    import re
    import shlex

    text = (DOCS / "quickstart.md").read_text()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
    servers = [b["mcpServers"]["knowledge"] for b in blocks if "mcpServers" in b]
    stdio = [s for s in servers if "command" in s]
    http = [s for s in servers if "url" in s]
    assert stdio and http
    for entry in stdio:
        assert entry.get("env", {}).get("SVC_KNOWLEDGE_DB_PATH", "/").startswith("/")
        if entry["command"] == "uvx":  # not installed: from uv's cache, never the index
            assert starts_offline(["uvx", *entry["args"]]), entry
            continue
        assert entry["command"].startswith("/") and entry["command"].endswith("/workbench")
        assert entry["args"] == ["mcp"]
    assert all(s["url"].endswith("/mcp") for s in http)
    adds = [shlex.split(line) for line in text.splitlines() if line.startswith("claude mcp add")]
    stdio_add = next(a for a in adds if "--" in a)
    assert stdio_add[stdio_add.index("--") + 1].startswith("/")
    assert stdio_add[stdio_add.index("--") + 2 :] == ["mcp"]
    assert any(
        a[a.index("--env") + 1].startswith("SVC_KNOWLEDGE_DB_PATH=/") for a in adds if "--env" in a
    )
    assert any("--transport" in a and a[-1].endswith("/mcp") for a in adds)
    assert all(starts_offline(a[a.index("--") + 1 :]) for a in adds if "--" in a)


def starts_offline(command: list[str]) -> bool:
    """A command a client spawns at every session starts with no package index: an installed
    ``workbench`` (an absolute path), or ``uvx --offline --from <absolute clone>``."""
    if command[0] != "uvx":
        return command[0].startswith("/") and command[-1] == "mcp"
    options = command[1 : command.index("workbench")]
    source = options[options.index("--from") + 1] if "--from" in options else ""
    return "--offline" in options and source.startswith("/") and command[-1] == "mcp"


def test_starts_offline_would_catch_a_uvx_that_asks_the_index():
    assert starts_offline(["/home/me/.local/bin/workbench", "mcp"])
    assert starts_offline(["uvx", "--offline", "--from", "/home/me/kw", "workbench", "mcp"])
    assert not starts_offline(["uvx", "--from", "/home/me/kw", "workbench", "mcp"])
    assert not starts_offline(["workbench", "mcp"])


def test_every_uvx_the_docs_give_a_client_is_offline():
    """Wherever the README and the docs show ``uvx … workbench mcp`` as a command to run, it
    has ``--offline``, and both recommend an install that starts offline first."""
    for path in (ROOT / "README.md", DOCS / "quickstart.md", DOCS / "deployment.md"):
        text = path.read_text()
        blocks = "\n".join(re.findall(r"```(?:bash|json)\n(.*?)```", text, re.S))
        for line in blocks.splitlines():
            if "uvx" in line and "workbench" in line:
                assert "--offline" in line, f"{path.name}: {line.strip()}"
            if '"uvx"' in line:
                assert '"--offline"' in blocks, path.name
    for path in (ROOT / "README.md", DOCS / "quickstart.md"):
        text = path.read_text()
        assert "pipx install ." in text and "uv tool install ." in text, path.name
