"""A throw-away PostgreSQL server for tests and benchmarks: Debian's ``postgresql`` binaries,
``initdb`` in a temporary folder (as the ``postgres`` user when we are root), a loopback port
and a unix socket in that folder, stopped and deleted at the end. No mocks of the database.

    with ThrowawayPostgres() as pg:
        url = pg.create_database()     # a fresh, empty database: postgresql://…/wb_1
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

__all__ = ["ThrowawayPostgres", "postgres_binaries"]


def postgres_binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` (Debian puts them under /usr/lib/postgresql)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ThrowawayPostgres:
    """A PostgreSQL cluster of its own, for one test session or one benchmark."""

    def __init__(self, port: int | None = None):
        if os.environ.get("WORKBENCH_TEST_QUICK") == "1":  # scripts/test.sh --quick
            import pytest

            pytest.skip("quick run (scripts/test.sh --quick): no PostgreSQL; the full run has it")
        self.bin = postgres_binaries()
        if self.bin is None:
            raise RuntimeError(
                "PostgreSQL's server binaries are not installed (Debian: apt-get install "
                "postgresql); .ci/run installs them"
            )
        self.port = port or _free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="wb-pg-"))
        self.data = self.dir / "data"
        self._names = itertools.count(1)
        self._root = os.geteuid() == 0

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._root:  # initdb and postgres refuse to run as root
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True)

    def start(self) -> ThrowawayPostgres:
        if self._root:
            shutil.chown(self.dir, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8")
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again, after :meth:`halt`) on the same port and data."""
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.data),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
            "-l",
            str(self.dir / "log"),
        )

    def halt(self) -> None:
        """Stop the server as an outage would (every connection cut), keeping its data for
        :meth:`resume` (a fast shutdown: this cluster commits asynchronously, and an
        immediate one could lose the last commits)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_of(self, database: str) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str | None = None) -> str:
        """A new empty database; its URL."""
        import psycopg

        name = name or f"wb_{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url, autocommit=True) as con:
            con.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def stop(self) -> None:
        if self.data.exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_for(predicate, timeout: float = 10.0, step: float = 0.05):
    """Poll until ``predicate()`` is truthy; its value (or the last one)."""
    deadline = time.monotonic() + timeout
    value = predicate()
    while not value and time.monotonic() < deadline:
        time.sleep(step)
        value = predicate()
    return value


def schema_url(server_url: str, schema: str) -> str:
    """A URL whose connections work in ``schema`` (created by the caller): one database
    server, one schema per test store."""
    sep = "&" if "?" in server_url else "?"
    return f"{server_url}{sep}options=-csearch_path%3D{schema}"
