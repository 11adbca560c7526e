"""The store's SQL on PostgreSQL: pure translation of the project's (DuckDB) statements.

The project's SQL is written once, in DuckDB's dialect, and kept to what PostgreSQL reads the
same way, with these differences bridged here:

- parameters: DuckDB's ``?``, ``$1`` and ``$name`` become psycopg's ``%s`` and ``%(name)s``
  (``$1`` may be used twice: it becomes a named parameter), and a literal ``%`` is doubled;
- types in DDL and casts: ``DOUBLE`` is ``DOUBLE PRECISION``, a fixed-size vector
  ``FLOAT[384]`` is ``REAL[]`` (the size is checked on write by the store, not by a type);
  ``BLOB`` is ``BYTEA``;
- the few DuckDB functions we use on lists and timestamps (``list_contains``, ``epoch_us``)
  exist on PostgreSQL as small SQL functions (:data:`COMPAT_FUNCTIONS`, created by the store);
  PostgreSQL inlines them, so ``list_contains(?, uuid)`` still uses the primary key.

Statements that cannot be written portably (a claim with ``FOR UPDATE SKIP LOCKED``, DuckDB's
``QUALIFY`` and ``arg_min``) choose their text by ``store.backend``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = ["to_postgres", "postgres_params", "COMPAT_FUNCTIONS"]

COMPAT_FUNCTIONS = (
    """CREATE OR REPLACE FUNCTION list_contains(anyarray, anyelement) RETURNS boolean
       LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT $2 = ANY($1)'""",
    """CREATE OR REPLACE FUNCTION epoch_us(timestamptz) RETURNS double precision
       LANGUAGE sql IMMUTABLE PARALLEL SAFE
       AS 'SELECT extract(epoch FROM $1)::double precision * 1000000'""",
)

_TYPE_RULES = (
    (re.compile(r"\bDOUBLE\b(?!\s+PRECISION)", re.IGNORECASE), "DOUBLE PRECISION"),
    (re.compile(r"\bFLOAT\s*\[\s*\d+\s*\]", re.IGNORECASE), "REAL[]"),
    (re.compile(r"\bBLOB\b", re.IGNORECASE), "BYTEA"),
)
_PARAM = re.compile(r"\?|\$(\d+)|\$([A-Za-z_]\w*)|%")


@lru_cache(maxsize=4096)
def to_postgres(sql: str) -> tuple[str, str]:
    """``(text, style)``: the statement for psycopg, and how its parameters are passed:
    ``"seq"`` (as given), ``"num"`` (``$1``…: a dict ``p1``…) or ``"named"`` (a dict)."""
    out: list[str] = []
    style = "seq"
    for quoted, part in _split_quoted(sql):
        if quoted:
            out.append(part.replace("%", "%%"))
            continue
        for pattern, repl in _TYPE_RULES:
            part = pattern.sub(repl, part)

        def param(m: re.Match[str]) -> str:
            nonlocal style
            if m.group(0) == "%":
                return "%%"
            if m.group(0) == "?":
                return "%s"
            if m.group(1):
                style = "num"
                return f"%(p{m.group(1)})s"
            style = "named"
            return f"%({m.group(2)})s"

        out.append(_PARAM.sub(param, part))
    return "".join(out), style


def postgres_params(
    style: str, params: Sequence[Any] | Mapping[str, Any] | None
) -> Sequence[Any] | Mapping[str, Any] | None:
    """The parameters in the form :func:`to_postgres`'s ``style`` needs."""
    if params is None:
        return None
    if style == "num" and not isinstance(params, Mapping):
        return {f"p{i + 1}": value for i, value in enumerate(params)}
    return params


def _split_quoted(sql: str) -> list[tuple[bool, str]]:
    """The statement cut into (inside a quoted literal or identifier, text) pieces."""
    pieces: list[tuple[bool, str]] = []
    i = start = 0
    n = len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"":
            if i > start:
                pieces.append((False, sql[start:i]))
            j = i + 1
            while j < n:
                if sql[j] == ch:
                    if j + 1 < n and sql[j + 1] == ch:  # a doubled quote inside
                        j += 2
                        continue
                    break
                j += 1
            pieces.append((True, sql[i : j + 1]))
            i = start = j + 1
            continue
        if ch == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
            if i > start:
                pieces.append((False, sql[start:i]))
            pieces.append((True, sql[i:end]))  # a comment: passed through as it is
            i = start = end
            continue
        i += 1
    if start < n:
        pieces.append((False, sql[start:]))
    return pieces
