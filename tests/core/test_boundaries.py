"""The core's boundaries: importing it loads no adapter layer and no heavy model library,
and its public API is small, sorted and real."""

import subprocess
import sys

import workbench

FORBIDDEN = ("litestar", "service", "voice", "uvicorn", "mcp", "IPython", "ipywidgets",
             "torch", "sentence_transformers", "transformers", "onnxruntime")


def test_importing_the_core_loads_no_adapter_and_no_model_library():
    code = (
        "import sys, workbench, workbench.facade, workbench.search.engine, workbench.decay.maintenance, "
        "workbench.llm, workbench.ingest.extract, workbench.ingest.episode_queue, workbench.ingest.importer\n"
        f"print([m for m in {FORBIDDEN!r} if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_the_public_api_is_sorted_and_importable():
    assert workbench.__all__ == sorted(workbench.__all__)
    for name in workbench.__all__:
        assert getattr(workbench, name) is not None
