"""``workbench import`` of a conversation export (``workbench.jobs.history``): on the database
itself, or through the service that holds it (the conversations read here, sent whole in
chunks to its ``import_memories`` tool as generic JSON lines, so the episode uuids are the
same either way). With ``--extract``, the predicted calls and cost are printed first (a dry
run over the whole file), then the import queues the extraction at low priority."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from workbench.jobs.conversations import Conversation, detect, parse, read_records

if TYPE_CHECKING:
    from workbench.facade import Workbench

__all__ = ["import_locally", "import_through", "print_estimate", "CHUNK_BYTES"]

CHUNK_LINES = 4000  # under the tool's 5,000 lines a call
CHUNK_BYTES = 512 * 1024  # as the entities-and-facts import: half the smallest body limit
SUMS = ("conversations", "episodes_created", "episodes_existing", "passages",
        "extraction_queued", "error_count")  # fmt: skip


def options(args: argparse.Namespace) -> dict[str, Any]:
    return {"gap_hours": args.session_gap_hours, "extract": args.extract}


def import_locally(wb: Workbench, args: argparse.Namespace) -> dict[str, Any]:
    """The import on the database file, its estimate printed first with ``--extract``."""
    from workbench.jobs.history import HistoryImport, import_history

    job = HistoryImport.of(wb)
    group = wb.settings.default_group_id if args.group_id is None else args.group_id
    fmt = None if args.format == "auto" else args.format
    run = {"first": 1, **options(args)}
    if args.extract or args.dry_run:
        plan = dict(import_history(job, args.file, fmt, group, dry_run=True, **run).as_dict())
        print_estimate(plan)
        if args.dry_run:
            return plan
    report = import_history(job, args.file, fmt, group, progress=not args.quiet, **run)
    answer = dict(report.as_dict())  # and what the command line shows beside the tool's
    answer["passages_without_vector"] = wb.passages.waiting()
    return answer


def import_through(live: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The import through a running service, in chunks of whole conversations."""
    from tqdm.auto import tqdm

    records, _ = read_records(args.file)
    fmt = detect(records) if args.format == "auto" else args.format
    if fmt is None:
        from workbench.errors import InvalidInput

        raise InvalidInput("cannot tell the conversation format: name it with --format")
    conversations, problems = parse(records, fmt)
    base = {"format": "jsonl", "session_gap_hours": args.session_gap_hours}
    if args.group_id:
        base["group_id"] = args.group_id
    if args.extract or args.dry_run:
        plan = _sum(live, conversations, {**base, "extract": True, "dry_run": True}, fmt, None)
        print_estimate(plan)
        if args.dry_run:
            return _with_problems(plan, problems)
    with tqdm(desc="import", unit="conversation", disable=args.quiet) as bar:
        total = _sum(live, conversations, {**base, "extract": args.extract}, fmt, bar)
    return _with_problems(total, problems)


def _sum(
    live: Any, conversations: list[Conversation], base: dict[str, Any], fmt: str, bar: Any
) -> dict[str, Any]:
    total: dict[str, Any] = {"format": fmt, **dict.fromkeys(SUMS, 0), "errors": []}
    estimates = []
    for lines, count, too_large in _chunks(conversations):
        for conversation in too_large:
            total["error_count"] += 1
            total["errors"].append(
                f"{conversation.position} ({conversation.key}): larger than a request to a "
                "running service may be; skipped (import it with the service stopped)"
            )
        if lines:
            report = live.call("import_memories", {**base, "lines": lines})
            for key in SUMS:
                total[key] += report.get(key, 0)
            total["errors"] += report.get("errors", [])
            if report.get("estimate"):
                estimates.append(report["estimate"])
        if bar is not None:
            bar.update(count)
    total["errors"] = total["errors"][:100]
    total["estimate"] = _summed(estimates)
    return total


def _chunks(
    conversations: list[Conversation],
) -> Iterator[tuple[list[dict[str, Any]], int, list[Conversation]]]:
    """(generic lines of whole conversations, conversations, those too large to send)."""
    lines: list[dict[str, Any]] = []
    size = count = 0
    too_large: list[Conversation] = []
    for conversation in conversations:
        mine = list(_lines(conversation))
        mine_size = sum(len(json.dumps(x, default=str)) + 2 for x in mine)
        if mine_size > CHUNK_BYTES or len(mine) > CHUNK_LINES:
            too_large.append(conversation)
            continue
        if lines and (size + mine_size > CHUNK_BYTES or len(lines) + len(mine) > CHUNK_LINES):
            yield lines, count, too_large
            lines, size, count, too_large = [], 0, 0, []
        lines += mine
        size += mine_size
        count += 1
    yield lines, count, too_large


def _lines(conversation: Conversation) -> Iterator[dict[str, Any]]:
    for message in conversation.messages:
        time = message.time or conversation.created
        yield {
            "conversation_id": conversation.key,
            "title": conversation.title or None,
            "role": message.speaker,
            "text": message.text,
            "time": time.isoformat() if time else None,
        }


def _summed(estimates: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not estimates:
        return None
    out = dict(estimates[0])
    for key in ("episodes", "calls", "prompt_tokens", "completion_tokens"):
        out[key] = sum(e.get(key) or 0 for e in estimates)
    usd = [e.get("usd") for e in estimates]
    out["usd"] = None if None in usd else round(sum(u for u in usd if u is not None), 6)
    return out


def _with_problems(total: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    total["errors"] = (problems + total["errors"])[:100]
    total["error_count"] += len(problems)
    return total


def print_estimate(plan: dict[str, Any]) -> None:
    """The import's counts and, with extraction, its predicted calls and cost, on stderr."""
    estimate = plan.get("estimate")
    lines = [f"{plan.get('episodes_created', 0)} new episodes, {plan.get('passages', 0)} passages"]
    if estimate:
        usd = estimate.get("usd")
        cost = f"{usd:.4f} USD" if usd is not None else "cost unknown (model not in price table)"
        lines.append(
            f"extraction: {plan.get('extraction_queued', 0)} episodes, ~{estimate['calls']} LLM "
            f"calls, ~{estimate['prompt_tokens']} prompt + {estimate['completion_tokens']} "
            f"completion tokens, {cost} with {estimate.get('model') or 'no model configured'} "
            "(the group's daily budget applies)"
        )
    print("\n".join(lines), file=sys.stderr)
