"""The scripts a newcomer runs: ``scripts/test.sh`` (full, for CI, and ``--quick``, a first run)
and ``scripts/run.sh`` (serving needs no dev toolchain). Each script runs for real in a copy of
the tree whose ``scripts/setup.sh`` and ``.venv/bin/*`` are stand-ins that write down how they
were called."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.quick import quick_skip_reason

ROOT = Path(__file__).resolve().parents[2]
RECORDER = """#!/usr/bin/env bash
{{ printf '%s' "$(basename "$0")"; for a in "$@"; do printf ' %s' "$a"; done
   printf ' |'; for v in {names}; do printf ' %s=%s' "$v" "${{!v:-}}"; done; echo; }} >> "{log}"
"""
NAMES = (
    "WITH_TORCH WITH_MULTILINGUAL WITH_POSTGRES WITH_VOICE WITH_LOCAL_LLM WITH_DEV "
    "WORKBENCH_TEST_QUICK WORKBENCH_TEST_BACKEND SVC_KNOWLEDGE_DB_PATH"
)


def stand_in_tree(tmp_path: Path, script: str) -> tuple[Path, Path]:
    """A copy of ``scripts/<script>`` (and pyproject.toml) beside recording stand-ins of the
    other scripts and of ``.venv/bin/*``; (the tree, the call log)."""
    tree, log = tmp_path / "clone", tmp_path / "calls.log"
    (tree / "scripts").mkdir(parents=True)
    (tree / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    recorder = RECORDER.format(names=NAMES, log=log)
    for path in (tree / "scripts" / "setup.sh", *(tree / ".venv" / "bin" / n for n in
                                                  ("python", "workbench"))):  # fmt: skip
        path.write_text(recorder)
        path.chmod(0o755)
    shutil.copy(ROOT / "scripts" / script, tree / "scripts" / script)
    return tree, log


def calls(tree: Path, log: Path, script: str, *args: str, **env: str) -> list[dict]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("WITH_", "WORKBENCH_"))}
    clean.pop("QUICK", None)
    result = subprocess.run(
        ["bash", str(tree / "scripts" / script), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    out = []
    for line in log.read_text().splitlines():
        command, _, variables = line.partition(" |")
        program, *arguments = command.split()
        values = dict(pair.split("=", 1) for pair in variables.split())
        out.append({"program": program, "args": arguments, **values})
    return out


def test_the_full_run_installs_everything_and_runs_both_backends(tmp_path):
    tree, log = stand_in_tree(tmp_path, "test.sh")
    setup, duckdb, postgres = calls(tree, log, "test.sh", "-x")
    assert setup["program"] == "setup.sh"
    for extra in ("WITH_TORCH", "WITH_POSTGRES", "WITH_VOICE", "WITH_LOCAL_LLM"):
        assert setup[extra] == "1", extra
    assert duckdb["args"][-3:] == ["tests", "notebooks", "-x"] and "--nbval-lax" in duckdb["args"]
    assert duckdb["WORKBENCH_TEST_QUICK"] == "" and postgres["WORKBENCH_TEST_BACKEND"] == "postgres"


@pytest.mark.parametrize("how", [("--quick",), ("QUICK=1",)])
def test_the_quick_run_skips_the_slow_set_up_and_the_postgres_pass(tmp_path, how):
    tree, log = stand_in_tree(tmp_path, "test.sh")
    env = dict(a.split("=", 1) for a in how if "=" in a)
    setup, duckdb = calls(tree, log, "test.sh", *(a for a in how if "=" not in a), "-x", **env)
    assert setup["WITH_TORCH"] == setup["WITH_VOICE"] == setup["WITH_LOCAL_LLM"] == "0"
    assert duckdb["WORKBENCH_TEST_QUICK"] == "1" and duckdb["args"][-1] == "-x"
    assert "notebooks" in duckdb["args"]  # the notebooks still run


def test_ci_runs_the_full_suite():
    ci = (ROOT / ".ci" / "run").read_text()
    runs = [line.strip() for line in ci.splitlines() if "scripts/test.sh" in line
            and not line.lstrip().startswith("#")]  # fmt: skip
    assert runs == ["scripts/test.sh"]
    assert "QUICK" not in ci


def test_a_quick_run_skips_only_what_it_lacks():
    assert quick_skip_reason(["pg_server", "tmp_path"]).startswith("quick run")
    assert quick_skip_reason(["torch_local"], importable=lambda m: False)
    assert quick_skip_reason(["torch_local"], importable=lambda m: True) is None
    assert quick_skip_reason(["tmp_path", "wb"]) is None
    assert "float32" in quick_skip_reason(["onnx_local", "onnx_cache"], importable=lambda m: False)


def test_the_readme_says_how_long_the_tests_take_and_offers_the_quick_run():
    readme = (ROOT / "README.md").read_text()
    quickstart = (ROOT / "docs" / "quickstart.md").read_text()
    for text in (readme, quickstart):
        assert "scripts/test.sh --quick" in text
        assert re.search(r"45 min", text) and re.search(r"5\.5 min", text)
    # exactly two set-up commands to copy: run and test
    blocks = re.findall(r"```bash\n(.*?)```", readme.split("## Install it for yourself")[0], re.S)
    assert [b.strip() for b in blocks] == ["scripts/run.sh", "scripts/test.sh"]


def test_run_sh_installs_only_what_serving_needs(tmp_path):
    tree, log = stand_in_tree(tmp_path, "run.sh")
    setup, serve = calls(tree, log, "run.sh", "--port", "8010")
    assert setup["program"] == "setup.sh" and setup["WITH_DEV"] == "0"
    assert serve["program"] == "workbench" and serve["args"] == ["serve", "--port", "8010"]
    assert serve["SVC_KNOWLEDGE_DB_PATH"] == str(tree / "data" / "knowledge.duckdb")


def installs(log: Path) -> list[list[str]]:
    """The ``uv pip install`` calls in the log: their arguments after ``install``."""
    found = []
    for line in log.read_text().splitlines() if log.exists() else ():
        words = line.split(" |")[0].split()
        if words[:5] == ["python", "-m", "uv", "pip", "install"]:
            found.append(words[5:])
    return found


def test_setup_sh_installs_the_base_for_serving_and_dev_for_the_tests(tmp_path):
    """The stamps ``.venv/.installed-<hash>-<part>``: serving's set-up installs the project
    alone; the tests' adds the dev extra; either after the other installs only what lacks."""
    tree, log = stand_in_tree(tmp_path, "setup.sh")
    calls(tree, log, "setup.sh", WITH_DEV="0")
    assert installs(log)[-1][-2:] == ["-e", "."]
    stamps = sorted(p.name.rsplit("-", 1)[1] for p in (tree / ".venv").glob(".installed-*"))
    assert stamps == ["base"]
    calls(tree, log, "setup.sh", WITH_DEV="0")
    assert len(installs(log)) == 1  # current: nothing to install
    calls(tree, log, "setup.sh")  # the tests' set-up: dev too
    assert installs(log)[-1][-2:] == ["-e", ".[dev]"]
    calls(tree, log, "setup.sh", WITH_DEV="0")  # serving after the tests: nothing again
    calls(tree, log, "setup.sh", WITH_POSTGRES="1")
    assert [i[-1] for i in installs(log)] == [".", ".[dev]", ".[dev,postgres]"]
