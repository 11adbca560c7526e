"""House rules of the layout that docs/architecture.md states, checked on the source: SQL only in
``workbench/store/``, no code outside it testing which database backend it runs on, no class of
the core over 500 lines, and the voice server independent of the memory service."""

from __future__ import annotations

import ast
import re
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


def long_classes(tree: ast.Module) -> list[tuple[str, int]]:
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]


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
    found = {path: c for path, tree in _sources("workbench").items() if (c := long_classes(tree))}
    assert found == {}, f"classes over {MAX_CLASS_LINES} lines: {found}"


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


def test_the_class_rule_would_catch_a_long_class():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_CLASS_LINES))
    assert long_classes(ast.parse(f"class Big:\n{body}\n")) == [("Big", MAX_CLASS_LINES + 1)]
