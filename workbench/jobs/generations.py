"""Pure rules of re-extraction (``workbench reextract``, :mod:`workbench.jobs.reextract`):
the cost estimate of a run, the match of new memories with old ones across generations (what a
promote writes), and the comparison of two graphs. Plain functions over rows (dicts of the
tables' columns)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from workbench.errors import InvalidInput
from workbench.llm.pricing import PriceTable, Usage, table_cost
from workbench.store.reextract import CARRIED, Row

DEFAULT_CALLS = 2  # one episode at a time: extract_entities, then extract_edges
CHARS_PER_TOKEN = 4
PROMPT_OVERHEAD = 700  # tokens of instructions and context around an episode's text
COMPLETION_TOKENS = 150  # per call, when no call is on record


@dataclass(frozen=True)
class Estimate:
    """What re-extracting ``episodes`` episodes should cost (see :func:`estimate`)."""

    group_id: str
    episodes: int
    calls: int
    prompt_tokens: int
    completion_tokens: int
    usd: float | None  # None: the model is not in the price table
    model: str | None
    basis: str  # "history" (calls on record), "mixed" or "default"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate(
    group_id: str,
    episodes: Sequence[dict[str, Any]],
    history: dict[str, tuple[int, int, int]],
    model: str | None,
    prices: PriceTable,
) -> Estimate:
    """Pure: the predicted calls and tokens of re-extracting ``episodes`` (dicts with
    ``uuid`` and ``body``) from ``history`` (episode uuid -> calls, prompt and completion
    tokens of its first extraction), priced at ``model``'s row of ``prices``."""
    known = [history[e["uuid"]] for e in episodes if e["uuid"] in history]
    calls = prompt = completion = 0
    for episode in episodes:
        if episode["uuid"] in history:
            c, p, o = history[episode["uuid"]]
        elif known:  # the group's average episode
            c, p, o = (round(sum(k[i] for k in known) / len(known)) for i in range(3))
        else:
            c = DEFAULT_CALLS
            p = c * (len(episode["body"]) // CHARS_PER_TOKEN + PROMPT_OVERHEAD)
            o = c * COMPLETION_TOKENS
        calls, prompt, completion = calls + c, prompt + p, completion + o
    price = prices.lookup(model)
    usd = table_cost(Usage(prompt, completion), price).total if price else None
    basis = "default" if not known else "history" if len(known) == len(episodes) else "mixed"
    return Estimate(group_id, len(episodes), calls, prompt, completion, usd, model, basis)


def one_action(group_id: Any, dry_run: bool, *runs: Any) -> None:
    """The ``reextract`` tool's rule: exactly one of a group (with ``dry_run`` or not) or a
    run id to promote, discard or compare."""
    named = [a for a in (group_id, *runs) if a is not None]
    if len(named) != 1 or (dry_run and group_id is None):
        raise InvalidInput(
            "name exactly one of 'group_id' (with 'dry_run' for the estimate only), "
            "'promote', 'discard' or 'compare'"
        )


# --- matching across generations ----------------------------------------------------------
@dataclass
class Swap:
    """What a promote writes: the new rows (uuids carried over where they match), the old
    uuids it deletes, and the episodes' new counts."""

    entities: list[dict[str, Any]] = field(default_factory=list)
    facts: list[dict[str, Any]] = field(default_factory=list)
    mentions: list[dict[str, Any]] = field(default_factory=list)
    removed: dict[str, list[str]] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)  # shadow uuid -> uuid written

    def counts(self, episodes: Iterable[str]) -> list[tuple[str, int, int]]:
        """(episode, entities it mentions, facts it stated) in the new graph."""
        entities: dict[str, int] = defaultdict(int)
        facts: dict[str, int] = defaultdict(int)
        for m in self.mentions:
            entities[m["episode_uuid"]] += 1
        for f in self.facts:
            facts[f["episode_uuid"]] += 1
        return [(e, entities[e], facts[e]) for e in sorted(episodes)]


@dataclass(frozen=True)
class Built:
    """What a finished shadow holds: its rows, the episodes it extracted, its vectors
    (kind -> uuid -> vector)."""

    entities: list[dict[str, Any]]
    facts: list[dict[str, Any]]
    mentions: list[dict[str, Any]]
    episodes: set[str]
    vectors: dict[str, dict[str, Any]]
    links: list[dict[str, Any]] = field(default_factory=list)  # its fact_sources rows

    def links_for(self, swap: Swap, live: set[str]) -> list[dict[str, Any]]:
        """The shadow's (fact, episode) links of the facts a promote writes, under the
        uuids it writes them with, for the live graph's episodes."""
        written = {f["uuid"] for f in swap.facts}
        out = []
        for link in self.links:
            fact = swap.renamed.get(link["fact_uuid"], link["fact_uuid"])
            if fact in written and link["episode_uuid"] in live:
                out.append({**link, "fact_uuid": fact})
        return out


def entity_key(row: dict[str, Any]) -> tuple[str, str]:
    return row["name_norm"], row["entity_type"]


def carry_over(
    old_entities: Sequence[Row],
    old_facts: Sequence[Row],
    kept: Sequence[Row],
    new_entities: Sequence[Row],
    new_facts: Sequence[Row],
    mentions: Sequence[Row],
) -> Swap:
    """Pure: the rows a promote writes. A new entity with the name and type of a kept one
    (imported) becomes it; of an old one, takes its uuid and :data:`CARRIED` columns. A new
    fact between the same (mapped) entities with the same relation as an old one, likewise
    (pairs in order of creation). Everything old that nothing took is removed."""
    swap = Swap()
    kept_by_key = {entity_key(e): e["uuid"] for e in kept}
    old_by_key: dict[tuple[str, str], Row] = {}
    for row in sorted(old_entities, key=lambda r: r["created_at"]):
        old_by_key.setdefault(entity_key(row), row)
    for row in new_entities:
        key = entity_key(row)
        if key in kept_by_key:
            swap.renamed[row["uuid"]] = kept_by_key[key]
            continue
        swap.entities.append(_carried(row, old_by_key.pop(key, None), swap.renamed))
    old_facts_by_key: dict[tuple[str, str, str], list[Row]] = defaultdict(list)
    for row in sorted(old_facts, key=lambda r: r["created_at"]):
        old_facts_by_key[(row["source_uuid"], row["target_uuid"], row["relation"])].append(row)
    for row in sorted(new_facts, key=lambda r: r["created_at"]):
        row = {**row}
        row["source_uuid"] = swap.renamed.get(row["source_uuid"], row["source_uuid"])
        row["target_uuid"] = swap.renamed.get(row["target_uuid"], row["target_uuid"])
        olds = old_facts_by_key.get((row["source_uuid"], row["target_uuid"], row["relation"]))
        swap.facts.append(_carried(row, olds.pop(0) if olds else None, swap.renamed))
    seen = set()
    for m in mentions:
        pair = (m["episode_uuid"], swap.renamed.get(m["entity_uuid"], m["entity_uuid"]))
        if pair not in seen:
            seen.add(pair)
            swap.mentions.append({"episode_uuid": pair[0], "entity_uuid": pair[1]})
    written = {
        "entity": {e["uuid"] for e in swap.entities},
        "fact": {f["uuid"] for f in swap.facts},
    }
    swap.removed = {
        "entity": [e["uuid"] for e in old_entities if e["uuid"] not in written["entity"]],
        "fact": [f["uuid"] for f in old_facts if f["uuid"] not in written["fact"]],
    }
    return swap


def _carried(row: Row, old: Row | None, renamed: dict[str, str]) -> Row:
    if old is None:
        return {**row}
    renamed[row["uuid"]] = old["uuid"]
    return {**row, "uuid": old["uuid"], **{c: old[c] for c in CARRIED}}


# --- the comparison -----------------------------------------------------------------------
def compare_graphs(
    old: tuple[Sequence[Row], Sequence[Row]],
    new: tuple[Sequence[Row], Sequence[Row]],
    names: Sequence[Row] = (),
) -> dict[str, Any]:
    """Pure: old vs new (each (entities, facts)) by content: entities by name and type (changed
    = another summary), facts by source, relation and target names (changed = another text);
    duplicates (rows sharing a key) and invalidated facts of each. ``names``: more entities
    the facts may name (the kept, imported ones)."""
    report: dict[str, Any] = {}
    for kind, index in (("entities", 0), ("facts", 1)):
        before = _keyed(kind, [*names, *old[0]], old[1]) if index else _keyed(kind, old[0])
        after = _keyed(kind, [*names, *new[0]], new[1]) if index else _keyed(kind, new[0])
        report[kind] = {
            "old": len(old[index]),
            "new": len(new[index]),
            "added": sorted(map(_show, set(after) - set(before))),
            "removed": sorted(map(_show, set(before) - set(after))),
            "changed": sorted(
                _show(k) for k in set(before) & set(after) if before[k][0] != after[k][0]
            ),
            "duplicates_old": sum(len(v) - 1 for v in before.values()),
            "duplicates_new": sum(len(v) - 1 for v in after.values()),
        }
    for name, (_, facts) in (("old", old), ("new", new)):
        report["facts"][f"invalidated_{name}"] = sum(
            1 for f in facts if f.get("invalid_at") is not None or f.get("expired_at") is not None
        )
    return report


def _keyed(
    kind: str, entities: Sequence[Row], facts: Sequence[Row] = ()
) -> dict[tuple[str, ...], list[str]]:
    """key -> the texts of the rows with that key (summary or fact text)."""
    out: dict[tuple[str, ...], list[str]] = defaultdict(list)
    if kind == "entities":
        for e in entities:
            out[(e["name"], e["entity_type"])].append(e["summary"])
        return out
    names = {e["uuid"]: e["name"] for e in entities}
    for f in facts:
        key = (names.get(f["source_uuid"], "?"), f["relation"], names.get(f["target_uuid"], "?"))
        out[key].append(f["fact"])
    return out


def _show(key: tuple[str, ...]) -> str:
    return " ".join(key) if len(key) == 3 else f"{key[0]} ({key[1]})"
