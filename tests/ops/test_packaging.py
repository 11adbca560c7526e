"""Installing honestly: the docs install from a clone or a wheel (the project is not on
PyPI), the console scripts and pins are what the code needs, and every library a notebook
imports is declared."""

from __future__ import annotations

import ast
import json
import re
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# an install command naming the project's own distribution as if an index had it
INDEX_INSTALL = re.compile(
    r"\b(?:pip|pipx|uv pip|uv tool)\s+install\b[^\n`]*?(?<![./\w-])['\"]?knowledge-workbench\b"
    r"|\buvx\s+(?:--from\s+)?['\"]?knowledge-workbench\b"
)


def install_texts() -> dict[Path, str]:
    files = [ROOT / "README.md", ROOT / "Dockerfile", *sorted((ROOT / "docs").glob("*.md"))]
    files += [p for p in sorted((ROOT / "ops").rglob("*")) if p.is_file()]
    return {path: path.read_text(errors="replace") for path in files}


def test_no_doc_installs_a_package_name_that_is_not_on_pypi():
    found = [
        f"{path.relative_to(ROOT)}: {match.group(0)}"
        for path, text in install_texts().items()
        for match in INDEX_INSTALL.finditer(text)
    ]
    assert found == []
    assert INDEX_INSTALL.search("pipx install 'knowledge-workbench[voice]'")  # the pattern bites
    assert INDEX_INSTALL.search("bin/pip install knowledge-workbench")
    assert not INDEX_INSTALL.search("pip install .")


def test_the_install_docs_name_the_ways_that_work():
    deployment = (ROOT / "docs" / "deployment.md").read_text()
    for command in ("pip install .", "pipx install .", "uvx --from . workbench mcp", "-m build"):
        assert command in deployment, command


def test_both_console_names_start_the_command():
    scripts = PYPROJECT["project"]["scripts"]
    assert scripts["workbench"] == scripts["knowledge-workbench"] == "service.control.cli:main"


def test_the_mcp_pin_admits_only_the_sdk_the_code_imports():
    (mcp,) = [Requirement(r) for r in PYPROJECT["project"]["dependencies"] if r.startswith("mcp")]
    assert not mcp.specifier.contains("1.27.0")  # mcp 1.x has no mcp_types
    assert mcp.specifier.contains(version("mcp"))


def test_the_build_backend_needs_nothing_but_setuptools():
    assert all(r.startswith("setuptools") for r in PYPROJECT["build-system"]["requires"])
    assert "multilingual" not in PYPROJECT["tool"]["setuptools"]["package-data"]


def notebook_imports() -> set[str]:
    modules: set[str] = set()
    sources = [(ROOT / "notebooks" / name).read_text() for name in ("lab.py", "memories.py")]
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        cells = json.loads(path.read_text())["cells"]
        sources += ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    for source in sources:
        clean = "\n".join(line for line in source.splitlines() if not line.startswith(("%", "!")))
        for node in ast.walk(ast.parse(clean)):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.add(node.module.split(".")[0])
    return modules


def test_every_library_the_notebooks_import_is_declared():
    project = PYPROJECT["project"]
    extras = project["optional-dependencies"]
    declared = {
        Requirement(r).name.lower()
        for r in [*project["dependencies"], *extras["notebooks"], *extras["voice"]]
    }
    owners = packages_distributions()
    own = {"workbench", "service", "serving", "voice", "lab", "memories", "__future__"}
    own.add("transformers")  # lab.py quietens it only when the torch extra installed it
    undeclared = []
    for module in sorted(notebook_imports() - own):
        distributions = owners.get(module)
        if distributions is None:
            continue  # the standard library
        if not {d.lower() for d in distributions} & declared:
            undeclared.append((module, distributions))
    assert undeclared == []
    assert {"networkx", "matplotlib"} <= notebook_imports()


def test_the_wheel_ships_every_file_of_the_memory_browser():
    """Every file the page at /ui serves is matched by a package-data glob (the wheel holds
    it; scripts/check_wheel.sh checks the installed one)."""
    from fnmatch import fnmatch

    from service.ui.routes import STATIC, static_files

    globs = PYPROJECT["tool"]["setuptools"]["package-data"]["service"]
    shipped = {name: any(fnmatch(f"ui/static/{name}", g) for g in globs) for name in static_files()}
    assert shipped and all(shipped.values()), shipped
    assert "index.html" in shipped and "views/group.js" in shipped
    assert {p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*") if p.is_file()} == set(
        shipped
    )  # nothing in static/ that the page would not serve
