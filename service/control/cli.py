"""The ``workbench`` command.

    workbench serve          tools over REST + MCP (127.0.0.1:8000), metrics (9090 / 9091 --dev)
    workbench worker         extraction from the queue without the tools (scaled-out workers)
    workbench mcp            MCP over stdio, for a client that spawns the server
    workbench embed-server   OpenAI-style embeddings on the local model (127.0.0.1:8001)
    workbench maintenance    one decay maintenance run
    workbench import FILE    import pre-extracted entities and facts (JSON lines or Parquet)
    workbench export DIR     Parquet snapshot of every table, for notebooks
    workbench status         the service status as JSON
    workbench reembed        embed every entity, fact and passage again with the configured model

Settings come from the environment (``SVC_KNOWLEDGE_*``, ``LOG_LEVEL``, an optional ``.env``);
flags override them. Every start-up problem is one clear ``error:`` line and a non-zero exit.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.control.bootstrap import freeze_loaded_memory, open_workbench, secrets_of
from serving.version import package_version
from workbench.config import Settings, load_settings
from workbench.errors import ConfigError, WorkbenchError
from workbench.names import GROUP_ID_RULE, is_group_id

if TYPE_CHECKING:
    from service.client.live import LiveService
    from workbench.embedding import Embedder
    from workbench.facade import Workbench
    from workbench.store.base import Store

log = logging.getLogger("service.cli")

EXIT_USAGE = 2
EXIT_FAILURE = 1


# --- helpers ------------------------------------------------------------------------------
def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    overrides = {"db_path": getattr(args, "db", None), **extra}
    return load_settings(**{k: v for k, v in overrides.items() if v is not None})


def default_log_format() -> str:
    """Readable lines for a person at a terminal, JSON lines for a log collector."""
    return "text" if sys.stderr.isatty() else "json"


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False))


# --- commands -----------------------------------------------------------------------------
def cmd_serve(args: argparse.Namespace) -> int:
    import functools

    from service.control.runner import serve as run_service

    serve = functools.partial(run_service, idle_exit=args.idle_exit)  # either branch below

    flags = {
        "host": args.host,
        "port": args.port,
        "metrics_port": args.metrics_port,
        "metrics_host": args.metrics_host,
    }
    settings = settings_from(args, **flags)
    log_format = args.log_format or ("text" if args.dev else default_log_format())
    if not args.local_llm:
        return serve(settings, dev=args.dev, log_format=log_format)
    from service.control.runner import check_exposure
    from service.sidecars.local_llm import LocalLLM

    check_exposure(settings)  # fail fast, before starting the model server
    with LocalLLM() as llm:
        overrides = llm.overrides()
        if "llm_profile" in settings.model_fields_set:  # the user's choice wins
            overrides.pop("llm_profile")
        settings = settings_from(args, **flags, **overrides)
        return serve(settings, dev=args.dev, log_format=log_format, llm_health=llm.health)


def cmd_worker(args: argparse.Namespace) -> int:
    from service.control.runner import serve_worker

    settings = settings_from(args, metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    return serve_worker(settings, log_format=args.log_format or default_log_format())


def cmd_mcp(args: argparse.Namespace) -> int:
    """MCP over stdio. On a database file: through the service that holds it, started in the
    background when nobody serves it (shared by every stdio client of the database; see
    ``service.control.shared``); ``:memory:`` and a PostgreSQL store: on the database itself. A
    database that cannot be opened does not close the connection: every tool answers with
    the reason."""
    import anyio

    from service.api.mcp_server import run_stdio
    from service.client.live import RemoteWorkbench, UnavailableWorkbench
    from service.control.joining import warn_if_different
    from service.control.shared import ClientLease, SharedService, shares
    from serving.logs import setup_logging

    settings = settings_from(args)
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    if shares(settings):
        with ClientLease(settings.db_location()):
            try:
                service = SharedService(settings)
            except WorkbenchError as exc:
                log.error("database %s: %s", settings.db_location(), exc.message)
                anyio.run(run_stdio, UnavailableWorkbench(exc.message))
                return 0
            log.info("database %s, through the service at %s", settings.db_location(), service.url)
            log.info("memory browser: %s/ui", service.url)
            record = service.record
            if record is not None:  # other LLM/embedder settings than the service's: said
                warn_if_different(settings, record.models, record.pid)
            try:
                anyio.run(run_stdio, RemoteWorkbench(service))
            finally:
                service.close()
        return 0
    try:
        workbench = open_workbench(settings, start=True)
    except WorkbenchError as exc:
        log.error("the database cannot be opened: %s", exc.message)
        anyio.run(run_stdio, UnavailableWorkbench(exc.message))
        return 0
    with workbench:
        freeze_loaded_memory()
        anyio.run(run_stdio, workbench)
    return 0


def cmd_embed_server(args: argparse.Namespace) -> int:
    from service.control.runner import serve_embeddings

    settings = settings_from(args)
    port = args.port if args.port is not None else settings.embed_server_port
    model = args.model or settings.local_embedder_model
    return serve_embeddings(settings, host=args.host or "127.0.0.1", port=port, model=model)


def on_database(
    args: argparse.Namespace,
    local: Callable[[Workbench], Any],
    remote: Callable[[LiveService], Any],
) -> Any:
    """``remote(live)`` through the service that holds the database, else ``local(workbench)``
    on the database itself."""
    from service.client.live import find_live
    from serving.logs import setup_logging

    settings = settings_from(args)
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    live = find_live(settings)
    if live is not None:
        log.info("database %s, held by the service at %s", settings.db_location(), live.url)
        try:
            return remote(live)
        finally:
            live.close()
    with open_workbench(settings) as workbench:
        return local(workbench)


def cmd_maintenance(args: argparse.Namespace) -> int:
    from serving.logs import setup_logging

    settings = settings_from(args)
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    report = on_database(
        args,
        lambda wb: wb.run_decay_maintenance(dry_run=args.dry_run),
        lambda live: live.call("run_decay_maintenance", {"dry_run": args.dry_run}),
    )
    print_json(report)
    return 0 if report.get("status", "success") != "failure" else EXIT_FAILURE


def cmd_import(args: argparse.Namespace) -> int:
    from serving.logs import setup_logging
    from workbench.jobs.conversations import is_conversations
    from workbench.store.restore import is_backup

    settings = settings_from(args)
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    if is_backup(args.file):
        print_json(restore_backup(settings, args.file))
        return 0
    if args.format != "facts" and (args.format != "auto" or is_conversations(args.file)):
        return import_conversations(args)
    summary = on_database(
        args,
        lambda wb: audited_locally(
            wb,
            "cli:import",
            [args.group_id or wb.settings.default_group_id],
            lambda: wb.import_jsonl(args.file, progress=not args.quiet, group_id=args.group_id),
        ),
        lambda live: import_through(live, args.file, args.group_id, not args.quiet),
    )
    print_json(summary)
    return 0


def import_conversations(args: argparse.Namespace) -> int:
    """``workbench import`` of a conversation export: ``service.control.history``."""
    from service.control import history

    group = [args.group_id] if args.group_id else []
    summary = on_database(
        args,
        lambda wb: audited_locally(
            wb,
            "cli:import",
            group or [wb.settings.default_group_id],
            lambda: history.import_locally(wb, args),
        ),  # fmt: skip
        lambda live: history.import_through(live, args),
    )
    print_json(summary)
    return 0


def restore_backup(settings: Settings, folder: str) -> dict[str, Any]:
    """``workbench import DIR`` of a ``workbench export`` folder: every table restored into
    the configured database, which must be empty and held by no service."""
    from service.client.live import find_live
    from workbench.errors import InvalidInput
    from workbench.store import Store
    from workbench.store.restore import read_backup, restore

    backup = read_backup(folder)
    live = find_live(settings)
    if live is not None:
        live.close()
        raise InvalidInput(
            f"the service at {live.url} holds {settings.db_location()}: a backup is restored "
            "into an empty database no process uses (stop the service, or restore into "
            "another one with --db)"
        )
    store = Store.open(
        settings.db_location(),
        dim=backup.dim,
        embedding_model=backup.model,
        pool_size=settings.database_pool_size,
    )
    try:
        log.info("restoring %s into the database %s", backup.directory, store.path)
        report = restore(store, backup, settings.max_episode_chars)
    finally:
        store.close()
    return {"database": store.path, **report}


def audited_locally(wb: Workbench, tool: str, groups: list[str], run: Callable[[], Any]) -> Any:
    """``run()`` on the database file, written to ``audit_log`` as the local user's ``tool``
    (through the service, its tools write the trail)."""
    try:
        result = run()
    except WorkbenchError as exc:
        wb.tenancy.audit("local", tool, groups, [], exc.kind)
        raise
    wb.tenancy.audit("local", tool, groups, [], "ok")
    return result


IMPORT_CHUNK = 1000
# bytes of lines per request: half the smallest body limit of any service (1 MiB, see
# service.api.app.MIN_BODY_BYTES), leaving room for the JSON escapes of the arguments; 1,000
# lines with 384-dimension vectors are ~4 MB
IMPORT_CHUNK_BYTES = 512 * 1024


def import_through(
    live: LiveService, path: str, group_id: str | None, progress: bool
) -> dict[str, Any]:
    """Stream an import file to the live service in chunks (the service imports each in
    its transactions); the report is the sum of the chunks' reports, with file line numbers."""
    from tqdm.auto import tqdm

    from workbench.jobs.importer import beside_records, entities_file, read_lines

    total = {
        "entities_created": 0,
        "entities_existing": 0,
        "facts_created": 0,
        "facts_existing": 0,
        "errors": [],
        "error_count": 0,
    }
    chunk: list[str] = []
    first = 1
    bar = tqdm(desc="import", unit="record", disable=not progress)

    def send() -> None:
        arguments = {"lines": chunk, "first_line": first, "file": Path(path).name}
        if group_id:
            arguments["group_id"] = group_id
        report = live.call("import_memories", arguments)
        for key in (
            "entities_created",
            "entities_existing",
            "facts_created",
            "facts_existing",
            "error_count",
        ):
            total[key] += report.get(key, 0)
        total["errors"] = (total["errors"] + report.get("errors", []))[:100]
        bar.update(len(chunk))

    beside = entities_file(path)  # its entities first, numbered in their own file
    for records in ([beside_records(beside)] if beside else []) + [read_lines(path)]:
        size = 0
        for number, line in records:
            encoded = len(json.dumps(line, default=str)) + 2
            if chunk and (len(chunk) >= IMPORT_CHUNK or size + encoded > IMPORT_CHUNK_BYTES):
                send()
                chunk, size = [], 0
            if encoded > IMPORT_CHUNK_BYTES:  # alone it would still be over a service's limit
                refuse_oversized(total, number, encoded)
                continue
            if not chunk:
                first = number
            chunk.append(line)
            size += encoded
        if chunk:
            send()
            chunk = []
    bar.close()
    return total


def refuse_oversized(total: dict[str, Any], number: int, encoded: int) -> None:
    """Count line ``number`` as refused: too large to send to a running service."""
    total["error_count"] += 1
    if len(total["errors"]) < 100:
        total["errors"].append(
            f"line {number}: {encoded} bytes, more than the {IMPORT_CHUNK_BYTES} a line may "
            "have to go through a running service (import it with the service stopped)"
        )


def cmd_export(args: argparse.Namespace) -> int:
    target = Path(args.dir).expanduser().resolve()
    written = on_database(
        args,
        lambda wb: audited_locally(wb, "cli:export", [], lambda: wb.export_parquet(target)),
        lambda live: moved_snapshot(live, target),
    )
    print_json(written)
    return 0


def moved_snapshot(live: LiveService, target: Path) -> dict[str, str]:
    """A snapshot the live service writes for this request, moved into ``target`` (created
    when missing; a table's file there is replaced, as a local export does). Only files
    :func:`service.client.live.snapshot_files` vouches for are moved; their emptied folder is
    removed, nothing else."""
    import os
    import shutil

    from service.client.live import snapshot_files

    folder, files = snapshot_files(live, live.call("export_snapshot"))
    target.mkdir(parents=True, exist_ok=True)
    moved = {table: str(shutil.move(path, target / path.name)) for table, path in files.items()}
    with contextlib.suppress(OSError):
        os.rmdir(folder)  # only when empty
    return moved


def cmd_status(args: argparse.Namespace) -> int:
    def remote(live: Any) -> dict[str, Any]:
        return {**live.call("get_status"), "ui": f"{live.url}/ui"}  # the memory browser

    print_json(on_database(args, lambda wb: wb.get_status(), remote))
    return 0


def cmd_reembed(args: argparse.Namespace) -> int:
    from service.client.live import find_live
    from serving.logs import setup_logging
    from workbench.errors import InvalidInput
    from workbench.jobs.switch_model import copy_database
    from workbench.store import Store

    settings = settings_from(args, embedder_model=args.model)
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    path = settings.db_location()
    if settings.database_url is not None:
        from workbench.store.postgres import redact_url

        log.info("database %s", redact_url(path))
    else:
        log.info("database %s", path)
    if settings.database_url is not None:
        if args.into:
            raise InvalidInput(
                "--into copies a DuckDB file; on PostgreSQL copy the database "
                "(CREATE DATABASE … TEMPLATE …) and point the URL at the copy"
            )
        embedder = embedder_for(settings)
        store = Store.open(path, dim=None)
        others = store.other_processes()
        if others:
            store.close()
            raise InvalidInput(
                f"{len(others)} other workbench processes use the database ({', '.join(others)})"
                ": stop every replica and worker first (re-embedding rewrites every vector; "
                "they would write vectors of the old model meanwhile), then start them with "
                "the new embedder"
            )
        return _reembed(store, embedder, args.quiet)
    if path == ":memory:":
        raise InvalidInput("reembed works on a database file (--db PATH)")
    if not Path(path).is_file():
        raise InvalidInput(f"database file not found: {path}")
    live = find_live(settings)
    if live is not None:
        live.close()
        raise InvalidInput(
            f"a running service holds {path}: stop it first (re-embedding rewrites every "
            "vector; the service would search the old ones meanwhile)"
        )
    embedder = embedder_for(settings)
    if args.into:
        source = Store.open(path, dim=None)  # its log written into the file before the copy
        source.checkpoint()
        source.close()
        path = str(copy_database(path, args.into))
    return _reembed(Store.open(path, dim=None), embedder, args.quiet)


def embedder_for(settings: Settings) -> Embedder:
    """The configured embedder, loaded (before the database is touched)."""
    from workbench.embedding import build_embedder

    embedder = build_embedder(settings)
    embedder.embed(["load the model before the database is touched"])
    return embedder


def _reembed(store: Store, embedder: Embedder, quiet: bool) -> int:
    from tqdm.auto import tqdm

    from workbench.jobs.switch_model import reembed
    from workbench.store.reembed import memory_count

    try:
        total = memory_count(store)
        with tqdm(total=total, desc="reembed", unit="memory", disable=quiet) as bar:
            report = reembed(store, embedder, bar.update)
    finally:
        store.close()
    print_json(report.as_dict())
    return 0


def _tool_on_database(args: argparse.Namespace, tool: str, arguments: dict[str, Any]) -> Any:
    """A tool on the database (audited as "local") or through the service holding it."""
    from service.api.tools import get_tool

    return on_database(
        args,
        lambda wb: get_tool(tool).invoke(wb, arguments),
        lambda live: live.call(tool, arguments),
    )


def cmd_tokens_add(args: argparse.Namespace) -> int:
    from service.control.tokens import ensure_owner

    groups = args.groups or []
    if groups and not args.admin:  # the first scoped token: the owner's admin token first
        note = ensure_owner(settings_from(args), functools.partial(_tool_on_database, args))
        if note:
            print(note, file=sys.stderr)
    made = _tool_on_database(
        args,
        "add_token",
        {"name": args.name, "groups": groups, "read_only": args.read_only, "admin": args.admin},
    )
    scope = "every group, admin" if made["admin"] else f"groups {', '.join(made['groups'])}"
    mode = ", read-only" if made["read_only"] else ""
    print(f"token {made['name']} ({scope}{mode}); shown only now, keep it safe:")
    print(made["token"])
    return 0


def cmd_tokens_list(args: argparse.Namespace) -> int:
    print_json(_tool_on_database(args, "list_tokens", {}))
    return 0


def cmd_tokens_revoke(args: argparse.Namespace) -> int:
    print(_tool_on_database(args, "revoke_token", {"name": args.name})["message"])
    return 0


def _add_tokens(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tokens = sub.add_parser(
        "tokens",
        help="create, list and revoke scoped API tokens",
        description="API tokens for the tools, each limited to some groups (and optionally "
        "read-only), stored hashed in the database: on the database file, or through the "
        "service holding it (with an admin token, SVC_KNOWLEDGE_API_TOKEN). A revoked token "
        "is refused by a running service within seconds.",
    )
    actions = tokens.add_subparsers(
        dest="action", metavar="ACTION", required=True, help="add, list or revoke"
    )
    add = actions.add_parser(
        "add", help="create a token (printed once, as the last word)", description="Create a "
        "token for some groups; the token is printed once, as the last word of the output.",
    )  # fmt: skip
    add.add_argument("name", metavar="NAME", help="the token's name (same rule as group names)")
    add.add_argument(
        "--groups", type=group_list, metavar="G1,G2", help="comma-separated groups it may use"
    )
    add.add_argument("--read-only", action="store_true", help="the token may only read/search")
    add.add_argument("--admin", action="store_true", help="every group and the admin-only tools")
    _add_db(add)
    add.set_defaults(func=cmd_tokens_add)
    listed = actions.add_parser(
        "list", help="the tokens as JSON (never the tokens themselves)",
        description="Names, groups, scopes, created and last used; never a token.",
    )  # fmt: skip
    _add_db(listed)
    listed.set_defaults(func=cmd_tokens_list)
    revoke = actions.add_parser(
        "revoke", help="revoke a token by name", description="Revoke a token by name."
    )
    revoke.add_argument("name", metavar="NAME", help="the token's name")
    _add_db(revoke)
    revoke.set_defaults(func=cmd_tokens_revoke)


def cmd_reextract(args: argparse.Namespace) -> int:
    """Beside a running service, through its ``reextract`` tool (no progress bar, the
    service's shadow folder); else on the database itself."""
    from serving.logs import setup_logging
    from workbench.errors import InvalidInput

    settings = settings_from(args)
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    action = {k: getattr(args, k) for k in ("promote", "discard", "compare") if getattr(args, k)}
    if len(action) + (args.group is not None) != 1:
        raise InvalidInput("name one of --group G, --promote RUN, --discard RUN, --compare RUN")
    if args.labelled and not args.compare:
        raise InvalidInput("--labelled goes with --compare RUN")
    arguments = {**action, **({"group_id": args.group} if args.group else {})}
    if args.dry_run:
        arguments["dry_run"] = True
    report = on_database(
        args,
        lambda wb: _reextract(wb, args, arguments),
        lambda live: _reextract_remote(live, args, arguments),
    )
    print_json(report)
    if args.group is None:
        return 0
    if args.dry_run:
        print(f"{report['calls']} calls")
        return 0
    print(f"run {report['run_id']}")
    return 0 if not report["pending"] else EXIT_FAILURE


def _reextract(
    workbench: Workbench, args: argparse.Namespace, arguments: dict[str, Any]
) -> dict[str, Any]:
    from tqdm.auto import tqdm

    runs = workbench.reextraction(shadow_dir=args.shadow_dir)
    if args.promote:
        return runs.promote(args.promote)
    if args.discard:
        return runs.discard(args.discard)
    if args.compare:
        report = runs.compare(args.compare)
        if args.labelled:
            from workbench.eval.extraction import gold_by_key, load_labelled, score_generations

            gold = gold_by_key(load_labelled(args.labelled))
            report["scores"] = score_generations(runs.rows(args.compare), gold)
        return report
    plan = runs.plan(args.group)
    if args.dry_run:
        return plan.as_dict()
    with tqdm(total=plan.episodes, desc="reextract", unit="episode", disable=args.quiet) as bar:
        return runs.run(args.group, bar.update)


def _reextract_remote(
    live: LiveService, args: argparse.Namespace, arguments: dict[str, Any]
) -> dict[str, Any]:
    from workbench.errors import InvalidInput

    if args.labelled or args.shadow_dir:
        raise InvalidInput(
            "--labelled and --shadow-dir need the database itself: a running service holds "
            "it (stop it, or leave them out)"
        )
    return live.call("reextract", arguments)


# --- parser -------------------------------------------------------------------------------
def group_arg(value: str) -> str:
    """A group name argument, checked by the one rule of group names."""
    if not is_group_id(value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a valid group name: {GROUP_ID_RULE}")
    return value


def group_list(value: str) -> list[str]:
    """Comma-separated group names, each checked."""
    return [group_arg(g.strip()) for g in value.split(",") if g.strip()]


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="PATH",
        help="DuckDB file (default: SVC_KNOWLEDGE_DB_PATH or knowledge.duckdb in the per-user "
        "data folder, $XDG_DATA_HOME/knowledge-workbench or ~/.local/share/knowledge-workbench; "
        "':memory:' for a throw-away store)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="workbench",
        description="Knowledge Workbench: long-term memory for AI assistants.",
        epilog="Settings: SVC_KNOWLEDGE_* environment variables (or .env); flags override.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    serve = sub.add_parser(
        "serve",
        help="run the knowledge service (REST + MCP tools, metrics, health)",
        description="Serve the tools over REST (POST /tools/<name>) and MCP streamable HTTP "
        "(/mcp), GET /health, the OpenAPI schema (/schema), and metrics plus "
        "decay health on the metrics port. Stops gracefully on SIGTERM/SIGINT.",
    )
    serve.add_argument(
        "--host",
        help="address to bind (default 127.0.0.1; anything but "
        "loopback requires SVC_KNOWLEDGE_API_TOKEN)",
    )
    serve.add_argument("--port", type=int, help="tools port (default 8000)")
    serve.add_argument(
        "--metrics-port", type=int, help="metrics port (default 9090, or 9091 with --dev)"
    )
    serve.add_argument(
        "--metrics-host",
        help="address the metrics port binds (default 127.0.0.1, whatever "
        "--host is; set SVC_KNOWLEDGE_METRICS_TOKEN when exposing it)",
    )
    serve.add_argument(
        "--dev", action="store_true", help="development mode: metrics on 9091, human-readable logs"
    )
    serve.add_argument(
        "--local-llm",
        action="store_true",
        help="start the bundled tiny local model (SmolLM2-135M via "
        "llama-cpp-python) as the LLM: fully offline, poor extraction",
    )
    serve.add_argument(
        "--idle-exit",
        type=float,
        metavar="SECONDS",
        help="stop once no `workbench mcp` client of the database has been running for "
        "SECONDS (how the shared background service that `workbench mcp` starts ends)",
    )
    serve.add_argument(
        "--log-format",
        choices=("json", "text"),
        help="log line format (default json; text with --dev or when stderr is a terminal)",
    )
    _add_db(serve)
    serve.set_defaults(func=cmd_serve)

    worker = sub.add_parser(
        "worker",
        help="extract episodes from the queue, without the tools (scaled-out workers)",
        description="Process the episode queue (LLM extraction) and the decay maintenance "
        "schedule, with metrics and decay health on the metrics port and no tools. Any "
        "number of workers and `serve` replicas can share one PostgreSQL store "
        "(SVC_KNOWLEDGE_DATABASE_URL): each claims episodes with a lease, a group's episodes "
        "run in order, and a worker that dies leaves its episodes to the others when its "
        "leases run out (SVC_KNOWLEDGE_QUEUE_LEASE_SECONDS). Stops gracefully on "
        "SIGTERM/SIGINT.",
    )
    worker.add_argument(
        "--metrics-port", type=int, help="metrics port (default 9090; 0 picks a free one)"
    )
    worker.add_argument("--metrics-host", help="address the metrics port binds (127.0.0.1)")
    worker.add_argument(
        "--log-format",
        choices=("json", "text"),
        help="log line format (default json; text when stderr is a terminal)",
    )
    _add_db(worker)
    worker.set_defaults(func=cmd_worker)

    mcp = sub.add_parser(
        "mcp",
        help="serve the tools over MCP on stdin/stdout",
        description="MCP over stdio for a client that spawns the server (logs go to stderr). "
        "On a database file every call goes to the service that holds it; when nobody serves "
        "it, the first client starts one in the background (`serve --idle-exit`, on free "
        "loopback ports, its log beside the database), which every later client shares and "
        "which stops SVC_KNOWLEDGE_MCP_IDLE_SECONDS after the last client has gone.",
    )
    _add_db(mcp)
    mcp.set_defaults(func=cmd_mcp)

    embed = sub.add_parser(
        "embed-server",
        help="run the local OpenAI-compatible embeddings server",
        description="POST /v1/embeddings and GET /v1/models (OpenAI wire format) on a local "
        "model run by ONNX Runtime (no torch; SVC_KNOWLEDGE_LOCAL_EMBEDDER_BACKEND=torch runs "
        "it in sentence-transformers instead); point SVC_KNOWLEDGE_EMBEDDER_BASE_URL at "
        "http://HOST:PORT/v1 (and set SVC_KNOWLEDGE_EMBEDDER_INPUT_TYPE=true for "
        "multilingual-e5-small).",
    )
    embed.add_argument("--host", help="address to bind (default 127.0.0.1)")
    embed.add_argument(
        "--port", type=int, help="port (default 8001 or SVC_KNOWLEDGE_EMBED_SERVER_PORT)"
    )
    embed.add_argument(
        "--model",
        help="multilingual-e5-small or all-MiniLM-L6-v2 (384 dimensions both), or a "
        "sentence-transformers model's name or path (default SVC_KNOWLEDGE_LOCAL_EMBEDDER_MODEL)",
    )
    embed.set_defaults(func=cmd_embed_server)

    maint = sub.add_parser(
        "maintenance",
        help="run one decay maintenance pass and exit",
        description="Recompute decay scores, apply lifecycle transitions "
        "and purge expired soft-deleted memories; prints the "
        "report as JSON.",
    )
    maint.add_argument(
        "--dry-run", action="store_true", help="report what would change without changing anything"
    )
    _add_db(maint)
    maint.set_defaults(func=cmd_maintenance)

    imp = sub.add_parser(
        "import",
        help="import entities and facts from a JSON-lines or Parquet file, or restore a backup",
        description="Import pre-extracted entities and facts (JSON lines or Parquet, "
        "optionally with their vectors; see the import format in the docs); no LLM is used. "
        "Given the folder `workbench export DIR` wrote, restore it instead: every table "
        "(episodes, entities, facts with their uuids, validity, decay state and vectors, "
        "and the rest) into an empty database.",
    )
    imp.add_argument(
        "file",
        metavar="FILE",
        help="a JSON-lines or Parquet file, or a backup folder written by `workbench export`",
    )
    imp.add_argument("--group-id", type=group_arg, help="group for records that name none")
    imp.add_argument("--quiet", action="store_true", help="no progress bar")
    imp.add_argument(
        "--format",
        choices=["auto", "facts", "chatgpt", "claude", "jsonl"],
        default="auto",
        help="facts: entities and facts; chatgpt, claude, jsonl: a conversation export, each "
        "conversation (session) a message episode (default: told from the file)",
    )
    imp.add_argument(
        "--extract",
        action="store_true",
        help="conversations: print the predicted LLM calls and cost, then queue the "
        "episodes' extraction at low priority (default: stored, searchable, not extracted)",
    )
    imp.add_argument(
        "--dry-run",
        action="store_true",
        help="conversations: print what would be imported (and its extraction's cost) only",
    )
    imp.add_argument(
        "--session-gap-hours",
        type=float,
        default=6.0,
        metavar="H",
        help="conversations: a new episode starts after a silence of more than H hours "
        "(0: one episode a conversation, cut only at the episode size limit; default 6)",
    )
    _add_db(imp)
    imp.set_defaults(func=cmd_import)

    exp = sub.add_parser(
        "export",
        help="write a Parquet snapshot of every table",
        description="Write DIR/<table>.parquet for every table (a consistent "
        "snapshot a notebook can read while the service runs "
        "elsewhere).",
    )
    exp.add_argument("dir", metavar="DIR", help="output folder (created when missing)")
    _add_db(exp)
    exp.set_defaults(func=cmd_export)

    status = sub.add_parser(
        "status",
        help="print the service status as JSON",
        description="Database, embedder, LLM, graph and queue counts.",
    )
    _add_db(status)
    status.set_defaults(func=cmd_status)

    again = sub.add_parser(
        "reembed",
        help="embed every entity, fact and passage again with the configured embedding model",
        description="Embed every entity, fact and passage with the configured embedder "
        "(or --model), in place or into a copy (--into), and make it the database's model: "
        "needed after switching embedding models, since a database holds vectors of one size "
        "and model. The service must be stopped. Stopped half-way, the database keeps its old "
        "vectors.",
    )
    again.add_argument("--model", help="local embedding model (default: the configured one)")
    again.add_argument(
        "--into", metavar="PATH", help="write a re-embedded copy here; the original is untouched"
    )
    again.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_db(again)
    again.set_defaults(func=cmd_reembed)
    _add_tokens(sub)

    rex = sub.add_parser(
        "reextract",
        help="re-extract a group's stored episodes into a shadow graph; promote or discard it",
        description="Extract a group's processed episodes again, in their original order, with "
        "the configured LLM, prompts and structured-output mode, into a shadow graph (searches "
        "keep answering from the live one). --dry-run predicts the calls, tokens and USD first. "
        "Run again to resume a stopped run. --compare shows old vs new, --promote swaps the "
        "graphs in one transaction, --discard drops the shadow. Beside a running service, "
        "through its reextract tool.",
    )
    rex.add_argument("--group", type=group_arg, help="the group to re-extract")
    rex.add_argument(
        "--dry-run", action="store_true", help="print the predicted calls, tokens and USD only"
    )
    rex.add_argument("--promote", metavar="RUN_ID", help="make a built run's graph the live one")
    rex.add_argument("--discard", metavar="RUN_ID", help="drop a run's shadow graph")
    rex.add_argument("--compare", metavar="RUN_ID", help="print old vs new graph of a run")
    rex.add_argument(
        "--labelled",
        metavar="FILE",
        help="with --compare: precision, recall and F1 of old and new on the labelled "
        "episodes of this JSON-lines file (data/extraction_labelled.jsonl's format)",
    )
    rex.add_argument(
        "--shadow-dir",
        metavar="DIR",
        help="folder of the shadow graphs (default: beside the DuckDB file, else the "
        "system's temporary folder)",
    )
    rex.add_argument("--quiet", action="store_true", help="no progress bar")
    _add_db(rex)
    rex.set_defaults(func=cmd_reextract)
    return parser


def run_guarded(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command; any failure is one ``error:`` line on stderr, never a traceback."""
    try:
        return func(args)
    except ConfigError as exc:  # a bad setting, or a start-up problem (StartupError)
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except WorkbenchError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence
        log.debug("unexpected failure", exc_info=True)
        print(
            f"error: unexpected {type(exc).__name__}: {exc} (LOG_LEVEL=DEBUG shows details)",
            file=sys.stderr,
        )
        return EXIT_FAILURE


def private_files() -> None:
    """What a command creates (the database, its WAL, shadows, search saves, folders) is
    this user's only: 0600 files in 0700 folders, whatever umask the shell gives."""
    os.umask(os.umask(0o077) | 0o077)


def main(argv: Sequence[str] | None = None) -> int:
    private_files()
    args = build_parser().parse_args(argv)
    return run_guarded(args.func, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
