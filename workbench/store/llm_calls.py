"""Rows of the ``llm_calls`` table: one per LLM request attempt.

``status`` is one of

* ``success`` — the reply was valid and returned to the caller;
* ``invalid``   — the reply arrived but did not conform (error_type = the error class name,
  e.g. ``StructuredOutputError`` or ``SchemaEchoError``);
* ``truncated`` — the reply was cut off (``finish_reason == "length"``);
* ``error``     — no usable reply (error_type ``rate_limit``, ``timeout`` or the exception
  class name, as on ``graph_llm_errors_total``).

Tokens and cost are recorded for every attempt that was answered (truncated and invalid replies
are billed too), so summing ``total_cost`` gives what the provider charges.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from workbench.safety import scrub
from workbench.store import Store

STATUSES = ("success", "invalid", "truncated", "error")


@dataclass(frozen=True)
class LLMCallRow:
    ts: datetime
    prompt_name: str
    model: str
    status: str
    episode_uuid: str | None = None
    attempt: int = 1
    error_type: str | None = None
    error_message: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    input_cost: float = 0.0
    output_cost: float = 0.0
    total_cost: float = 0.0
    cache_cost_saved: float = 0.0
    latency_seconds: float = 0.0
    finish_reason: str | None = None
    run_id: str | None = None  # the re-extraction run that made the call (None: ingestion)


_COLUMNS = tuple(LLMCallRow.__dataclass_fields__)
_INSERT = (
    f"INSERT INTO llm_calls ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)})"
)


def defer_llm_call(store: Store, row: LLMCallRow) -> None:
    """Write the row with the store's next commit (see :meth:`Store.defer`): the LLM client
    logs every call, and an episode's calls then cost no commit of their own."""
    store.defer("llm_calls", _INSERT, _values(row))


def record_llm_call(store: Store, row: LLMCallRow) -> None:
    """Write the row now, in its own commit: a re-extraction's calls go to a live store that
    has no other write to carry them, and must be on record even if the run is killed."""
    with store.transaction():
        store.execute(_INSERT, _values(row))


def _values(row: LLMCallRow) -> list[Any]:
    values = [getattr(row, c) for c in _COLUMNS]
    values[_COLUMNS.index("error_message")] = scrub(row.error_message)
    return values


def list_llm_calls(
    store: Store,
    *,
    episode_uuid: str | None = None,
    prompt_name: str | None = None,
    status: str | None = None,
    limit: int = 100,
) -> list[dict[str, Any]]:
    """Most recent first, optionally filtered."""
    where, params = _filters(episode_uuid=episode_uuid, prompt_name=prompt_name, status=status)
    return store.fetch_dicts(
        f"SELECT * FROM llm_calls {where} ORDER BY id DESC LIMIT ?", [*params, int(limit)]
    )


def cost_summary(store: Store, *, episode_uuid: str | None = None) -> dict[str, Any]:
    """Totals over the rows (optionally of one episode): calls, errors, tokens, USD."""
    where, params = _filters(episode_uuid=episode_uuid)
    row = store.fetch_dicts(
        f"""SELECT count(*) AS calls,
                   count(*) FILTER (WHERE status <> 'success') AS failed_attempts,
                   coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
                   coalesce(sum(completion_tokens), 0) AS completion_tokens,
                   coalesce(sum(cached_tokens), 0) AS cached_tokens,
                   coalesce(sum(cache_write_tokens), 0) AS cache_write_tokens,
                   coalesce(sum(input_cost), 0) AS input_cost,
                   coalesce(sum(output_cost), 0) AS output_cost,
                   coalesce(sum(total_cost), 0) AS total_cost,
                   coalesce(sum(cache_cost_saved), 0) AS cache_cost_saved
            FROM llm_calls {where}""",
        params,
    )[0]
    return {k: (float(v) if "cost" in k else int(v)) for k, v in row.items()}


def cost_by_prompt(store: Store) -> list[dict[str, Any]]:
    """Per prompt name and model: calls, tokens, USD, mean latency (for notebooks)."""
    return store.fetch_dicts(
        """SELECT prompt_name, model, count(*) AS calls,
                  sum(prompt_tokens) AS prompt_tokens,
                  sum(completion_tokens) AS completion_tokens,
                  sum(total_cost) AS total_cost,
                  avg(latency_seconds) AS mean_latency_seconds
           FROM llm_calls GROUP BY prompt_name, model ORDER BY total_cost DESC, prompt_name"""
    )


def _filters(**equals: str | None) -> tuple[str, list[Any]]:
    clauses, params = [], []
    for column, value in equals.items():
        if value is not None:
            clauses.append(f"{column} = ?")
            params.append(value)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params
