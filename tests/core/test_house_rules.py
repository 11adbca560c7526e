"""House rules of the layout that docs/architecture.md states, checked on the source: SQL only in
``workbench/store/``, no code outside it testing which database backend it runs on, no class of
the core over 500 lines, and the voice server independent of the memory service."""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_CLASS_LINES = 500
# a string that is an SQL statement: its first word a statement's, then SQL's shape
_SQL = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+\s+SET\s|DELETE\s+FROM\s|"
    r"CREATE\s+(TABLE|INDEX|UNIQUE|VIEW|SEQUENCE)\s|ALTER\s+TABLE\s|DROP\s+(TABLE|INDEX)\s|"
    r"WITH\s+\w+\s+AS\s*\()",
    re.DOTALL,
)
_BACKENDS = {"duckdb", "postgres", "postgresql"}


def _sources(*packages: str, outside: str | None = None) -> dict[str, ast.Module]:
    found = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if outside and rel.startswith(outside):
                continue
            found[rel] = ast.parse(path.read_text(encoding="utf-8"))
    return found


_RUNS_SQL = {"execute", "executemany", "fetchone", "fetchall", "fetch_dicts", "fetch_df", "sql"}


def sql_statements(tree: ast.Module) -> list[int]:
    """Lines of string constants (f-strings too) that are SQL statements, or that are given to
    a method that runs SQL."""
    lines = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _RUNS_SQL
            and node.args
            and isinstance(node.args[0], ast.Constant | ast.JoinedStr)
        ):
            lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if _SQL.match(node.value):
                lines.append(node.lineno)
        elif isinstance(node, ast.JoinedStr):
            head = "".join(
                v.value
                for v in node.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str)
            )
            if _SQL.match(head):
                lines.append(node.lineno)
    return sorted(set(lines))


def backend_tests(tree: ast.Module) -> list[int]:
    """Lines comparing a ``.backend`` attribute with a database backend's name."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = {
            s.value.lower()
            for s in sides
            if isinstance(s, ast.Constant) and isinstance(s.value, str)
        }
        attrs = {s.attr for s in sides if isinstance(s, ast.Attribute)}
        if names & _BACKENDS and "backend" in attrs:
            lines.append(node.lineno)
    return lines


def long_classes(trees: Mapping[str, ast.Module]) -> list[tuple[str, int]]:
    """Classes over :data:`MAX_CLASS_LINES`, each counted with the project classes it inherits
    from (an abstract base, one deriving from ``ABC`` or ``Protocol``, aside): a class split
    into parents or mixins is still one object to read (STYLE.md 21)."""
    classes: dict[str, tuple[int, list[str], bool]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                bases = [_base_name(b) for b in node.bases]
                abstract = bool({"ABC", "Protocol"} & set(bases))
                classes[node.name] = (node.end_lineno - node.lineno + 1, bases, abstract)

    def family(name: str, found: set[str]) -> set[str]:
        found.add(name)
        for base in classes[name][1]:
            if base in classes and base not in found and not classes[base][2]:
                family(base, found)
        return found

    totals = {name: sum(classes[c][0] for c in family(name, set())) for name in classes}
    return sorted((name, total) for name, total in totals.items() if total > MAX_CLASS_LINES)


def _base_name(base: ast.expr) -> str:
    if isinstance(base, ast.Subscript):  # Generic[T], Protocol[T]
        base = base.value
    if isinstance(base, ast.Name):
        return base.id
    return base.attr if isinstance(base, ast.Attribute) else ""


def imported_modules(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_sql_statements_sit_only_in_the_store():
    found = {
        path: lines
        for path, tree in _sources(
            "workbench", "service", "serving", "voice", outside="workbench/store/"
        ).items()
        if (lines := sql_statements(tree))
    }
    assert found == {}, f"SQL outside workbench/store/ (file: lines): {found}"


def test_no_code_outside_the_store_tests_the_backend_name():
    found = {
        path: lines
        for path, tree in _sources(
            "workbench", "service", "serving", "voice", outside="workbench/store/"
        ).items()
        if (lines := backend_tests(tree))
    }
    assert found == {}, f"backend names tested outside workbench/store/: {found}"


def test_no_class_of_the_core_is_over_500_lines():
    found = long_classes(_sources("workbench"))
    assert found == [], f"classes over {MAX_CLASS_LINES} lines with their bases: {found}"


def test_the_voice_server_imports_nothing_of_the_memory_service():
    found = {
        path: sorted(
            m for m in imported_modules(tree) if m == "service" or m.startswith("service.")
        )
        for path, tree in _sources("voice").items()
    }
    assert {p: m for p, m in found.items() if m} == {}


@pytest.mark.parametrize(
    "source, finder",
    [
        ('q = "SELECT id FROM facts WHERE x = ?"', sql_statements),
        ('q = f"DELETE FROM {table} WHERE id = ?"', sql_statements),
        ('q = """\n    INSERT INTO t VALUES (1)"""', sql_statements),
        ('store.fetchone("PRAGMA version")', sql_statements),
        ('if store.backend == "duckdb": pass', backend_tests),
        ('ok = "postgres" != self.store.backend', backend_tests),
    ],
)
def test_the_rules_would_catch_a_breach(source, finder):
    assert finder(ast.parse(source)) == [1]


@pytest.mark.parametrize(
    "source, finder",
    [
        ('msg = "select the facts from a group"', sql_statements),
        ('if embedder.backend == "onnx": pass', backend_tests),
    ],
)
def test_the_rules_pass_prose_and_other_backends(source, finder):
    assert finder(ast.parse(source)) == []


def _class(name: str, bases: str, lines: int) -> str:
    body = "\n".join(f"    x{i} = {i}" for i in range(lines - 1))
    return f"class {name}{bases}:\n{body}\n"


def test_the_class_rule_would_catch_a_long_class():
    tree = ast.parse(_class("Big", "", MAX_CLASS_LINES + 1))
    assert long_classes({"big.py": tree}) == [("Big", MAX_CLASS_LINES + 1)]


def test_the_class_rule_would_catch_a_split_by_inheritance():
    """Two halves of 300 lines, one inheriting from the other (in another module, through a
    mixin too): the child is one object of 600 lines; its parents alone are not over."""
    parent = ast.parse(_class("Half", "", 300))
    child = ast.parse(_class("Whole", "(Mixin, Half, Generic[T])", 150) + _class("Mixin", "", 60))
    found = long_classes({"a.py": parent, "b.py": child})
    assert found == [("Whole", 510)]


def test_the_class_rule_leaves_out_an_abstract_base():
    """An abstract base (ABC, Protocol) is a contract the reader knows, not a part to read."""
    base = ast.parse(_class("Contract", "(ABC)", 300) + _class("Shape", "(Protocol[T])", 300))
    impl = ast.parse(_class("Impl", "(Contract, Shape)", 300))
    assert long_classes({"a.py": base, "b.py": impl}) == []
