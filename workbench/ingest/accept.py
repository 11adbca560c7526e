"""What an accepted episode is: ``add_memory``'s arguments checked and made into the
episode's row, and the answer to a retry of an episode already accepted. Pure functions."""

from __future__ import annotations

import json
import sys
import uuid as uuidlib
from datetime import datetime
from typing import Any

from workbench import errors
from workbench.clock import TimeOutOfRange, as_utc
from workbench.ingest.pipeline import NO_LLM
from workbench.safety import MAX_JSON_DEPTH, json_depth, scrub
from workbench.store.schema import PRIORITIES

SOURCES = ("text", "message", "json")
MAX_NAME = 500


def episode_row(
    name: Any,
    body: Any,
    group_id: str,
    source: Any,
    source_description: Any,
    uuid: Any,
    reference_time: Any,
    priority: Any,
    *,
    max_chars: int,
    now: datetime,
    llm_configured: bool,
) -> dict[str, Any]:
    """The row of an episode from ``add_memory``'s arguments (``group_id`` already checked),
    or :class:`~workbench.errors.InvalidInput` naming the argument that is wrong."""
    if not isinstance(name, str) or not name.strip():
        raise errors.InvalidInput("'name' must be a non-empty string")
    if len(name) > MAX_NAME:
        raise errors.InvalidInput(f"'name' has {len(name)} characters; at most {MAX_NAME}")
    if not isinstance(body, str) or not body.strip():
        raise errors.InvalidInput("'episode_body' must be a non-empty string")
    if len(body) > max_chars:
        raise errors.InvalidInput(
            f"'episode_body' has {len(body)} characters; at most {max_chars} "
            "(split it into several episodes)"
        )
    for argument, value in (("name", name), ("episode_body", body),
                            ("source_description", source_description)):  # fmt: skip
        check_no_nul(argument, value)
    if source not in SOURCES:
        raise errors.InvalidInput(f"'source' must be one of {', '.join(SOURCES)}")
    if source == "json":
        check_json_episode(body)
    if priority not in PRIORITIES:
        raise errors.InvalidInput(f"'priority' must be one of {', '.join(PRIORITIES)}")
    return {
        "uuid": check_uuid(uuid) if uuid else str(uuidlib.uuid4()),
        "group_id": group_id,
        "name": name.strip(),
        "body": body,
        "source": source,
        "source_description": str(source_description or "")[:MAX_NAME],
        "reference_time": time_arg("reference_time", reference_time) or now,
        "created_at": now,
        "priority": PRIORITIES[priority],
        "status": "queued",
        "status_detail": None if llm_configured else NO_LLM,
    }


def check_no_nul(argument: str, value: Any) -> None:
    """:class:`~workbench.errors.InvalidInput` when the text ``value`` holds a NUL character:
    PostgreSQL cannot store one, so neither backend accepts it (the same input is refused
    the same way on both)."""
    if isinstance(value, str) and "\x00" in value:
        raise errors.InvalidInput(
            f"'{argument}' contains a NUL character (U+0000), which cannot be stored"
        )


def added_before(existing: dict[str, Any], episode: dict[str, Any]) -> dict[str, Any]:
    """A retry of an ``add_memory`` that reached us (same uuid, same episode) gets the
    first one's answer; other content under a used uuid is a conflict."""
    same = all(existing[k] == episode[k] for k in ("group_id", "name", "body", "source"))
    if not same:
        raise errors.Conflict(
            f"an episode with uuid {episode['uuid']} already exists with other content"
        )
    return {
        "message": f"Episode '{existing['name']}' was added before (a retry): not added again",
        "episode_uuid": existing["uuid"],
        "group_id": existing["group_id"],
        "status": existing["status"],
        "detail": scrub(existing.get("status_detail")) or existing["status"],
    }


def check_json_episode(body: str) -> None:
    if json_depth(body) > MAX_JSON_DEPTH:
        raise errors.InvalidInput(
            f"'episode_body' nests deeper than {MAX_JSON_DEPTH} levels for source 'json'"
        )
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        raise errors.InvalidInput(
            f"'episode_body' is not valid JSON for source 'json': {exc.msg}"
        ) from None
    except ValueError:  # the one other refusal: an integer of more digits than Python reads
        raise errors.InvalidInput(
            "'episode_body' holds a number of more than "
            f"{sys.get_int_max_str_digits()} digits (source 'json'): send it as a string"
        ) from None


def check_uuid(value: Any) -> str:
    try:
        return str(uuidlib.UUID(str(value)))
    except (ValueError, TypeError, AttributeError):
        raise errors.InvalidInput(f"{value!r} is not a valid uuid") from None


def time_arg(name: str, value: Any) -> datetime | None:
    try:
        parsed: datetime | None = as_utc(value)
        return parsed
    except TimeOutOfRange as exc:
        raise errors.InvalidInput(f"'{name}' is out of range: {exc}") from None
    except (TypeError, ValueError):
        raise errors.InvalidInput(
            f"'{name}' must be an ISO 8601 timestamp such as 2025-03-01T12:00:00Z"
        ) from None
