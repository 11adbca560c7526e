"""Running the servers: start-up checks, uvicorn on pre-bound sockets, graceful shutdown.

Start-up order (each problem is one :class:`StartupError` line, never a traceback): exposure
rule (non-loopback needs a token) → ports (bound before anything slow, so "in use" is
immediate) → embedder (compat: probed, the error names its URL; local: loaded) → store
(``StoreLocked`` names the file) → workers → serving.

Shutdown on SIGTERM/SIGINT: uvicorn stops accepting and finishes in-flight requests, then the
workbench stops (the queue finishes or releases its episodes, access updates are flushed) and
the store is checkpointed and closed. An accepted episode is a committed queue row before its
request is answered, so even SIGKILL loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import logging
import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import uvicorn

from service.client.live import held_by, remove_record, write_record
from service.control.bootstrap import freeze_loaded_memory, open_workbench, secrets_of
from service.control.joining import model_settings
from service.control.timeouts import TimedH11Protocol, timed_protocol
from serving.addresses import is_loopback
from serving.logs import setup_logging
from workbench.config import Settings
from workbench.errors import ConfigError, EmbedderError, StoreLocked, StoreUnavailable
from workbench.llm.health import LLMHealth
from workbench.search import timewords

if TYPE_CHECKING:
    from service.control.shared import IdleWatch
    from workbench.embedding import Embedder
    from workbench.facade import Workbench
    from workbench.llm.client import ChatModel, CompatChatModel

log = logging.getLogger("service")

MIN_TOKEN_CHARS = 16
GRACEFUL_SECONDS = 10
QUEUE_STOP_SECONDS = 30.0
WARM_UP_JOIN_SECONDS = 120.0
TOOL_THREADS = 16


class StartupError(ConfigError):
    """A start-up problem (exposure, port) with its one-line explanation."""


def check_exposure(settings: Settings) -> None:
    """Bound beyond loopback, the tools need a bearer token (and a strong one)."""
    if is_loopback(settings.host):
        return
    token = settings.api_token.get_secret_value() if settings.api_token else ""
    if not token:
        raise StartupError(
            f"--host {settings.host} is not a loopback address: set SVC_KNOWLEDGE_API_TOKEN "
            "so that callers must send 'Authorization: Bearer <token>' (or bind 127.0.0.1)"
        )
    if len(token) < MIN_TOKEN_CHARS:
        raise StartupError(
            f"SVC_KNOWLEDGE_API_TOKEN has {len(token)} characters; use at least "
            f"{MIN_TOKEN_CHARS} random ones when binding {settings.host}"
        )


def metrics_token(settings: Settings) -> str | None:
    """The metrics port's bearer token; exposed without one, it says so in the log."""
    token = settings.metrics_token.get_secret_value() if settings.metrics_token else None
    if not token and not is_loopback(settings.metrics_host):
        log.warning(
            "the metrics port is bound to %s without SVC_KNOWLEDGE_METRICS_TOKEN: "
            "anyone who reaches it reads the metrics and decay health",
            settings.metrics_host,
        )
    return token or None


def bind_socket(host: str, port: int, what: str, flag: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on sockets that say they are
    # TCP; without it every keep-alive response waits ~40 ms for a delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(
                f"port {port} on {host} is already in use ({what}): stop the other process "
                f"or choose another port with {flag}"
            ) from None
        raise StartupError(f"cannot bind {what} to {host}:{port}: {exc.strerror}") from None
    return sock


def bound_port(sock: socket.socket) -> int:
    """The port ``sock`` is bound to (the one the system chose when asked for port 0)."""
    return int(sock.getsockname()[1])


def prepare_embedder(settings: Settings, background: bool = False) -> Embedder:
    """Build the embedder; a compat one is probed now (its errors name the URL and sizes).

    A local model is loaded now, or with ``background`` returned unloaded: the caller warms it
    up with :func:`warm_in_background` while already serving (its import costs seconds).
    """
    from workbench.embedding import build_embedder

    embedder = build_embedder(settings)
    if hasattr(embedder, "probe"):
        embedder.probe()
    elif not background:
        embedder.embed(["warm up"])
    return embedder


def warm_in_background(
    embedder: Embedder, loaded: threading.Event, on_failure: Callable[[str], None]
) -> threading.Thread:
    """Load the model in a thread; ``loaded`` is set when done, ``on_failure(message)`` else."""

    def warm() -> None:
        started = time.monotonic()
        try:
            embedder.embed(["warm up"])
        except Exception as exc:  # noqa: BLE001 - reported as one line, then the service stops
            on_failure(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}")
            return
        loaded.set()
        log.info(
            "local embedding model %s loaded in %.1f s", embedder.model, time.monotonic() - started
        )

    thread = threading.Thread(target=warm, name="embedder-warm-up", daemon=True)
    thread.start()
    return thread


def probe_llm_in_background(chat: ChatModel | None) -> threading.Thread | None:
    """Send the LLM its start-up probe in a thread (``GET /health`` shows the outcome within
    the probe's timeout, before any episode); a failure is logged as one warning."""
    if chat is None or not hasattr(chat, "probe"):
        return None

    def probe() -> None:
        if chat.probe():
            log.info("the LLM %s answered its start-up probe", chat.model)
            return
        # only the compat client answers a probe: its health is what GET /health shows
        status = cast("CompatChatModel", chat).health.status()
        log.warning(
            "the LLM %s at %s does not answer usably (%s: %s): episodes will fail until it "
            "does; GET /health shows its state",
            chat.model,
            getattr(chat, "base_url", "?"),
            status["last_error_type"],
            status["last_error"],
        )

    thread = threading.Thread(target=probe, name="llm-probe", daemon=True)
    thread.start()
    return thread


# which server a uvicorn log line comes from: several run in one process and event loop, and
# uvicorn's own lines ("Started server process", "Application startup complete") do not say
_SERVER_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("server_label", default="")


class _LabelServerLines(logging.Filter):
    """Prefix uvicorn's lines with the server's name and address (from the serving task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        label = _SERVER_LABEL.get()
        if label and not getattr(record, "server_labelled", False):
            record.msg = f"{label}: {record.msg}"
            record.server_labelled = True
        return True


_LABEL_FILTER = _LabelServerLines()


def server_label(name: str, sock: socket.socket) -> str:
    """``tools server on http://127.0.0.1:8000`` for a bound socket."""
    host, port = sock.getsockname()[:2]
    return f"{name} on http://{f'[{host}]' if ':' in host else host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: :func:`serve_all` owns the signals (uvicorn's
    would re-raise SIGTERM after serving and kill the process before the queue is drained);
    its log lines name the server and its address."""

    def __init__(self, config: uvicorn.Config, name: str = "server"):
        super().__init__(config)
        self.name = name

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        if sockets:
            _SERVER_LABEL.set(server_label(self.name, sockets[0]))  # this task's context only
        await super().serve(sockets=sockets)


def make_server(
    app: Any,
    graceful: int = GRACEFUL_SECONDS,
    name: str = "server",
    settings: Settings | None = None,
) -> _Server:
    """A server of ``app``; ``settings`` give its read timeouts (default: those of
    :class:`TimedH11Protocol`)."""
    http = (
        timed_protocol(settings.header_timeout_seconds, settings.body_timeout_seconds)
        if settings is not None
        else TimedH11Protocol
    )
    uvicorn_log = logging.getLogger("uvicorn.error")
    if _LABEL_FILTER not in uvicorn_log.filters:
        uvicorn_log.addFilter(_LABEL_FILTER)
    return _Server(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=False,
            lifespan="on",
            server_header=False,
            timeout_graceful_shutdown=graceful,
            proxy_headers=False,
            http=http,
        ),
        name,
    )


async def serve_all(
    pairs: list[tuple[_Server, socket.socket]], on_ready: Callable[[], None] | None = None
) -> None:
    """Serve every (server, socket) until a signal, or until one of them stops;
    ``on_ready`` runs once every server has started."""
    loop = asyncio.get_running_loop()
    servers = [server for server, _ in pairs]

    def request_exit(sig: signal.Signals) -> None:
        if sig == signal.SIGINT and any(s.should_exit for s in servers):
            for server in servers:
                server.force_exit = True
        log.info("received %s: stopping (in-flight requests finish first)", sig.name)
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, request_exit, sig)
    tasks = [asyncio.create_task(server.serve(sockets=[sock])) for server, sock in pairs]
    try:
        while on_ready and not all(s.started for s in servers):
            if any(t.done() for t in tasks):
                break
            await asyncio.sleep(0.02)
        else:
            if on_ready:
                on_ready()
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for server in servers:
            server.should_exit = True
        await asyncio.gather(*tasks)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def serve(
    settings: Settings,
    dev: bool = False,
    log_format: str = "json",
    llm_health: LLMHealth | None = None,
    idle_exit: float | None = None,
) -> int:
    """``workbench serve`` (``llm_health``: the record a supervisor of the LLM keeps;
    ``idle_exit``: stop once no ``workbench mcp`` client has been registered for that long)."""
    started = time.monotonic()
    check_exposure(settings)
    from service.api.app import create_app
    from service.sidecars.metrics_server import METRICS_PATH, create_metrics_app

    setup_logging(settings.log_level, secrets_of(settings), fmt=log_format)
    close_to_others(settings)
    metrics_port = settings.resolved_metrics_port(dev)
    main_sock = bind_socket(settings.host, settings.port, "the tools port", "--port")
    metrics_sock = bind_socket(
        settings.metrics_host, metrics_port, "the metrics port", "--metrics-port"
    )
    loaded = threading.Event()
    failures: list[str] = []
    pairs: list[tuple[Any, socket.socket]] = []
    warming: threading.Thread | None = None

    def embedder_failed(message: str) -> None:
        failures.append(message)
        for server, _ in pairs:
            server.should_exit = True

    try:
        embedder = prepare_embedder(settings, background=True)
        # the model loads while the search indexes do (both mostly native code)
        if hasattr(embedder, "probe"):
            loaded.set()
        else:
            warming = warm_in_background(embedder, loaded, embedder_failed)
        workbench = open_workbench(settings, embedder=embedder, llm_health=llm_health)
        # the date parser of search's time words loads its languages meanwhile (seconds)
        threading.Thread(target=timewords.warm_up, name="timewords-warm-up", daemon=True).start()
    except BaseException as exc:
        main_sock.close()
        metrics_sock.close()
        if warming is not None:
            # a model still loading in native threads when the interpreter exits aborts the
            # process (exit 134) after the error line: let it finish first
            warming.join(WARM_UP_JOIN_SECONDS)
        if isinstance(exc, StoreLocked):
            raise StoreLocked(held_by(settings, exc.message)) from None
        raise
    try:
        log.info(
            "%d objects loaded at start-up exempted from full garbage collections",
            freeze_loaded_memory(),
        )
        workbench.start()
        probe_llm_in_background(workbench.chat)
        pairs += [
            (
                make_server(
                    create_app(workbench, settings, embedder_loaded=loaded),
                    name="tools server",
                    settings=settings,
                ),
                main_sock,
            ),
            (
                make_server(
                    create_metrics_app(workbench, metrics_token(settings)), 2, "metrics server"
                ),
                metrics_sock,
            ),
        ]
        base = f"http://{_url_host(settings.host)}"
        metrics_base = f"http://{_url_host(settings.metrics_host)}"

        if failures:  # the model failed while the workbench opened: stop at once
            for server, _ in pairs:
                server.should_exit = True

        def ready() -> None:
            log.info(
                "ready in %.1f s: tools %s:%d (REST /tools, MCP /mcp, /health, /schema), "
                "metrics %s:%d%s, database %s, embedder %s (%d dims%s), LLM %s",
                time.monotonic() - started,
                base,
                bound_port(main_sock),  # the real one: --port 0 binds a free port
                metrics_base,
                bound_port(metrics_sock),
                METRICS_PATH,
                workbench.store.path,
                embedder.model,
                embedder.dimensions,
                ""
                if loaded.is_set()
                else "; loading in the background, /health is 503 until it is loaded",
                getattr(workbench.chat, "model", None)
                or "not configured (episodes wait in the queue)",
            )
            log.info("memory browser: %s/ui", client_url(settings.host, main_sock))

        # the CLI, stdio MCP and notebooks reach this database through the tools from now on:
        # written before serving (the socket is bound, so a client that reads it waits in the
        # backlog) so that no one sees /health answer while the record is still missing
        if not shared_store(settings):  # replicas of a shared store are reached directly
            write_record(
                settings.db_location(),
                client_url(settings.host, main_sock),
                bool(settings.api_token and settings.api_token.get_secret_value()),
                snapshots=workbench.snapshots.folder(),
                models=model_settings(settings),
            )
        watch = idle_watch(settings, idle_exit, [server for server, _ in pairs])
        tool_threads()
        try:
            asyncio.run(serve_all(pairs, ready))
        finally:
            if watch is not None:
                watch.stop()
    finally:
        if not shared_store(settings):
            remove_record(settings.db_location())
        stop_workbench(workbench, "the workbench", "stopped; the database is closed")
        if warming is not None:
            warming.join(WARM_UP_JOIN_SECONDS)  # stopped while the model loads: see above
    if failures:
        raise StartupError(f"the local embedding model failed to load: {failures[0]}")
    return 0


def close_to_others(settings: Settings) -> None:
    """A database file (and its WAL) of this user that others may read, made by an earlier
    version or another umask, becomes 0600 (new files are: see ``cli.private_files``)."""
    if shared_store(settings) or settings.db_location() == ":memory:":
        return
    db = Path(settings.db_location()).expanduser()
    for path in (db, db.with_name(db.name + ".wal")):
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o077:
                os.chmod(path, 0o600)
                log.info(
                    "%s was open to other users (mode %o): now 0600", path, info.st_mode & 0o777
                )


def tool_threads(count: int = TOOL_THREADS) -> None:
    """The threads the REST tools run in (Litestar's; asyncio's default would be
    ``cpu_count + 4``, 6 on 2 cores)."""
    from concurrent.futures import ThreadPoolExecutor

    from litestar.concurrency import set_asyncio_executor

    set_asyncio_executor(ThreadPoolExecutor(count, thread_name_prefix="tools"))


def idle_watch(settings: Settings, grace: float | None, servers: list[Any]) -> IdleWatch | None:
    """With ``--idle-exit``: stop the servers once the database's stdio clients have gone."""
    if grace is None:
        return None
    from service.control.shared import IdleWatch

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    return IdleWatch(settings.db_location(), grace, stop).start()


def shared_store(settings: Settings) -> bool:
    """Whether the store is a database server shared with other processes (PostgreSQL)."""
    return settings.database_url is not None


def serve_worker(settings: Settings, log_format: str = "json") -> int:
    """``workbench worker``: extraction (the queue) and the maintenance schedule on the store,
    with metrics and decay health on the metrics port and no tools; until SIGTERM/SIGINT."""
    from service.sidecars.metrics_server import METRICS_PATH, create_metrics_app

    setup_logging(settings.log_level, secrets_of(settings), fmt=log_format)
    metrics_port = settings.resolved_metrics_port(False)
    metrics_sock = bind_socket(
        settings.metrics_host, metrics_port, "the metrics port", "--metrics-port"
    )
    try:
        workbench = open_workbench(settings, embedder=prepare_embedder(settings))
    except BaseException:
        metrics_sock.close()
        raise
    try:
        if workbench.chat is None:
            raise StartupError(
                "a worker extracts episodes with an LLM and none is configured: set "
                "SVC_KNOWLEDGE_COMPAT_BASE_URL and SVC_KNOWLEDGE_COMPAT_MODEL"
            )
        if not shared_store(settings):
            log.warning(
                "the worker uses the DuckDB file %s: no other process can open it meanwhile "
                "(set SVC_KNOWLEDGE_DATABASE_URL to share a PostgreSQL store)",
                settings.db_location(),
            )
        workbench.start()
        probe_llm_in_background(workbench.chat)
        server = make_server(
            create_metrics_app(workbench, metrics_token(settings)), 2, "metrics server"
        )
        log.info(
            "worker ready: extracting from the queue of %s, metrics %s:%d%s",
            workbench.store.path,
            f"http://{_url_host(settings.metrics_host)}",
            metrics_sock.getsockname()[1],
            METRICS_PATH,
        )
        asyncio.run(serve_all([(server, metrics_sock)]))
    finally:
        stop_workbench(workbench, "the worker", "worker stopped")
    return 0


def stop_workbench(workbench: Workbench, what: str, done: str) -> None:
    """Graceful stop: running episodes finish or go back to the queue, then close."""
    log.info("stopping %s: finishing or releasing claimed episodes", what)
    try:
        try:
            workbench.stop(timeout=QUEUE_STOP_SECONDS)
        finally:
            workbench.close()
    except StoreUnavailable as exc:  # a stop is no failure: its claims return by their leases
        log.warning("%s stopped while its database was unreachable: %s", what, exc)
        return
    log.info(done)


def serve_embeddings(settings: Settings, host: str, port: int, model: str) -> int:
    """``workbench embed-server``."""
    from service.sidecars.embed_server import create_embed_app
    from workbench.embedding import local_embedder

    started = time.monotonic()
    setup_logging(settings.log_level, secrets_of(settings), fmt="text")
    sock = bind_socket(host, port, "the embeddings port", "--port")
    try:
        embedder = local_embedder(settings, model)
        embedder.warm_up()
    except EmbedderError:
        sock.close()
        raise
    if not is_loopback(host):
        log.warning("the embeddings server has no authentication and is bound to %s", host)

    def ready() -> None:
        log.info(
            "ready in %.1f s: embeddings http://%s:%d/v1 (model %s, %d dims)",
            time.monotonic() - started,
            _url_host(host),
            port,
            embedder.model,
            embedder.dimensions,
        )

    server = make_server(create_embed_app(embedder), name="embeddings server")
    asyncio.run(serve_all([(server, sock)], ready))
    return 0


def client_url(host: str, sock: socket.socket) -> str:
    """Where a client on this machine reaches a server bound to ``host`` (a wildcard bind is
    reached through loopback)."""
    reach = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    return f"http://{_url_host(reach)}:{sock.getsockname()[1]}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
