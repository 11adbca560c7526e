"""Extraction scoring: compare predicted entities and facts with a labelled gold set.

Pure functions over values; no LLM, no store, no pandas (``to_frame`` imports it lazily).

Matching rules (one place, so a notebook reader can check them):

* **Names** are compared after :func:`loose_name_key`: Unicode NFKD with diacritics dropped,
  case-folded, apostrophes removed (``O'Brien`` = ``OBrien``), every other punctuation
  character read as a space, whitespace collapsed, and a leading English article (``the``,
  ``a``, ``an``) dropped when more words follow. ``"The  Acme-Corp."`` and ``"acme corp"``
  are the same name.
* **Aliases** come from two sources only, both visible in the data:

  1. aliases the gold set declares on an entity (``"aliases": ["VS Code"]``);
  2. a person's first name: a gold entity of type ``Person`` with a name of two or more words
     is also matched by its first word alone, and a gold ``Person`` named by one word is also
     matched by a predicted multi-word name starting with that word -- but only when exactly
     one gold entity of the episode could be meant (no other gold person shares the first
     word and no other gold entity is called that).

  An alias that would point at two gold entities points at none.
* **Duplicates** collapse: predictions that resolve to the same gold entity (or, when they
  resolve to none, to the same normalised name) count once. How many were collapsed is
  reported as ``duplicates`` so a dedupe regression stays visible without distorting P/R.
* **Entities** match by name only (``entities``) and by name and type (``typed_entities``).
* **Facts** match on ``(source, target, relation)`` with both endpoints resolved as above and the
  relation normalised to UPPER_SNAKE_CASE. Direction matters: ``A -> B`` does not match
  ``B -> A`` unless the relation is listed in ``symmetric_relations``. A fact with the right
  endpoints but another relation is one false positive and one false negative; the relaxed
  ``fact_links`` score ignores the relation (endpoints and direction only) so a notebook can
  tell "wrong relation name" from "missed the link". ``relation_synonyms`` maps predicted
  relation names onto gold ones before comparison (e.g. ``{"EMPLOYED_BY": "WORKS_AT"}``).
* **Ended facts** (``invalid_at`` set: "Alex used VS Code until November") are facts like any
  other. ``ended_facts=False`` drops them from both sides first, for pipelines that record an
  ended relationship by invalidating the older fact instead of restating it.
* **Zero division**: precision with no predictions is 1.0 when there is also nothing to find,
  else 0.0; recall with nothing to find is 1.0 when nothing was predicted, else 0.0; F1 is 0.0
  when precision + recall is 0. An empty prediction of an empty episode scores 1/1/1.
* **Aggregation**: micro sums true/false positives and false negatives over episodes; macro
  averages the per-episode precision, recall and F1.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from workbench.errors import InvalidInput
from workbench.names import loose_name_key, relation_name

if TYPE_CHECKING:  # pandas loads only when a frame is built
    import pandas as pd

# --- normalisation ----------------------------------------------------------------------


# --- values -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Entity:
    name: str
    entity_type: str | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class Fact:
    """A directed fact. ``fact``, ``valid_at`` and ``invalid_at`` are carried, not compared."""

    source: str
    target: str
    relation: str = "RELATES_TO"
    fact: str = ""
    valid_at: str | None = None
    invalid_at: str | None = None

    @property
    def ended(self) -> bool:
        return bool(self.invalid_at)


@dataclass(frozen=True)
class Extraction:
    """What one episode yields (predicted) or should yield (gold)."""

    entities: tuple[Entity, ...] = ()
    facts: tuple[Fact, ...] = ()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Extraction:
        """Accepts ``{"entities": [{"name", "entity_type"?, "aliases"?}], "facts": [{"source",
        "target", "relation"?, "fact"?}]}``; ``type``/``relation_type`` are read as synonyms."""
        try:
            entities = tuple(
                Entity(
                    name=str(e["name"]),
                    entity_type=e.get("entity_type", e.get("type")),
                    aliases=tuple(e.get("aliases") or ()),
                )
                for e in data.get("entities") or ()
            )
            facts = tuple(
                Fact(
                    source=str(f["source"]),
                    target=str(f["target"]),
                    relation=str(f.get("relation") or f.get("relation_type") or "RELATES_TO"),
                    fact=str(f.get("fact") or ""),
                    valid_at=_time_text(f.get("valid_at")),
                    invalid_at=_time_text(f.get("invalid_at")),
                )
                for f in data.get("facts") or ()
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InvalidInput(
                f"extraction is malformed ({exc!r}): entities need 'name', facts need "
                "'source' and 'target'"
            ) from None
        return cls(entities, facts)


def _time_text(value: Any) -> str | None:
    if value is None or value == "":
        return None
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def without_ended_facts(extraction: Extraction) -> Extraction:
    """The extraction minus facts with ``invalid_at``."""
    return Extraction(extraction.entities, tuple(f for f in extraction.facts if not f.ended))


@dataclass(frozen=True)
class LabelledEpisode:
    """One line of ``data/extraction_labelled.jsonl``."""

    id: str
    name: str
    episode_body: str
    group_id: str
    source: str
    source_description: str
    reference_time: str
    gold: Extraction


@dataclass(frozen=True)
class PRF:
    """Counts and the precision, recall and F1 they imply."""

    tp: int = 0
    fp: int = 0
    fn: int = 0

    @property
    def precision(self) -> float:
        if self.tp + self.fp == 0:
            return 1.0 if self.fn == 0 else 0.0
        return self.tp / (self.tp + self.fp)

    @property
    def recall(self) -> float:
        if self.tp + self.fn == 0:
            return 1.0 if self.fp == 0 else 0.0
        return self.tp / (self.tp + self.fn)

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 0.0 if p + r == 0 else 2 * p * r / (p + r)

    def __add__(self, other: PRF) -> PRF:
        return PRF(self.tp + other.tp, self.fp + other.fp, self.fn + other.fn)


@dataclass(frozen=True)
class Macro:
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class EpisodeScore:
    episode_id: str
    entities: PRF
    typed_entities: PRF
    facts: PRF
    fact_links: PRF
    duplicates: int = 0
    missed_entities: tuple[str, ...] = ()
    extra_entities: tuple[str, ...] = ()
    missed_facts: tuple[tuple[str, str, str], ...] = ()
    extra_facts: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class SetScore:
    episodes: tuple[EpisodeScore, ...]
    entities: PRF
    typed_entities: PRF
    facts: PRF
    fact_links: PRF
    macro_entities: Macro
    macro_typed_entities: Macro
    macro_facts: Macro
    macro_fact_links: Macro
    duplicates: int = 0
    unscored: tuple[str, ...] = field(default=())


# --- entity resolution ------------------------------------------------------------------
def _claim(table: dict[str, int | None], key: str, index: int) -> None:
    """Record ``key -> index``; a key claimed by two different entities becomes None."""
    if key:
        table[key] = index if table.get(key, index) == index else None


class _Resolver:
    """Maps any name (predicted or gold) to a comparison key within one episode.

    Tiers, strongest first: a gold entity's own name, an alias the gold set declares, a
    person's first name. A stronger tier hides a weaker one; within a tier a key claimed by
    two entities is ambiguous and matches nothing.
    """

    def __init__(self, gold: Sequence[Entity]):
        self._names = [loose_name_key(e.name) for e in gold]
        own: dict[str, int | None] = {}
        aliases: dict[str, int | None] = {}
        first: dict[str, int | None] = {}
        self._persons_by_first: dict[str, int | None] = {}
        for i, ent in enumerate(gold):
            _claim(own, self._names[i], i)
            for alias in ent.aliases:
                _claim(aliases, loose_name_key(alias), i)
            words = self._names[i].split()
            if ent.entity_type == "Person" and words:
                _claim(self._persons_by_first, words[0], i)
                if len(words) > 1:
                    _claim(first, words[0], i)
        self._index = {**first, **aliases, **own}

    def key(self, name: str) -> str:
        norm = loose_name_key(name)
        if norm in self._index:
            hit = self._index[norm]
            return "name:" + norm if hit is None else "gold:" + self._names[hit]
        words = norm.split()
        if len(words) > 1:  # "Maya Chen" predicted, the gold person is just "Maya"
            hit = self._persons_by_first.get(words[0])
            if hit is not None and " " not in self._names[hit]:
                return "gold:" + self._names[hit]
        return "name:" + norm


def _display(key: str) -> str:
    return key.split(":", 1)[1]


# --- scoring ----------------------------------------------------------------------------
def _prf(pred: set[Any], gold: set[Any]) -> PRF:
    return PRF(tp=len(pred & gold), fp=len(pred - gold), fn=len(gold - pred))


def _fact_keys(
    facts: Iterable[Fact],
    resolver: _Resolver,
    synonyms: Mapping[str, str],
    symmetric: frozenset[str],
) -> set[tuple[str, str, str]]:
    keys = set()
    for f in facts:
        rel = relation_name(f.relation)
        rel = synonyms.get(rel, rel)
        src, dst = resolver.key(f.source), resolver.key(f.target)
        if rel in symmetric and dst < src:
            src, dst = dst, src
        keys.add((src, dst, rel))
    return keys


def score_episode(
    predicted: Extraction,
    gold: Extraction,
    episode_id: str = "",
    relation_synonyms: Mapping[str, str] | None = None,
    symmetric_relations: Iterable[str] = (),
    ended_facts: bool = True,
) -> EpisodeScore:
    """Score one episode's predicted extraction against its gold extraction."""
    if not ended_facts:
        predicted, gold = without_ended_facts(predicted), without_ended_facts(gold)
    resolver = _Resolver(gold.entities)
    synonyms = {relation_name(k): relation_name(v) for k, v in (relation_synonyms or {}).items()}
    symmetric = frozenset(relation_name(r) for r in symmetric_relations)

    pred_keys = [resolver.key(e.name) for e in predicted.entities]
    gold_keys = {resolver.key(e.name) for e in gold.entities}
    pred_set = set(pred_keys)
    typed_pred = {(resolver.key(e.name), e.entity_type or "") for e in predicted.entities}
    typed_gold = {(resolver.key(e.name), e.entity_type or "") for e in gold.entities}

    pred_facts = _fact_keys(predicted.facts, resolver, synonyms, symmetric)
    gold_facts = _fact_keys(gold.facts, resolver, {}, symmetric)
    links = {(s, t) for s, t, _ in pred_facts}
    gold_links = {(s, t) for s, t, _ in gold_facts}

    return EpisodeScore(
        episode_id=episode_id,
        entities=_prf(pred_set, gold_keys),
        typed_entities=_prf(typed_pred, typed_gold),
        facts=_prf(pred_facts, gold_facts),
        fact_links=_prf(links, gold_links),
        duplicates=len(pred_keys) - len(pred_set),
        missed_entities=tuple(sorted(_display(k) for k in gold_keys - pred_set)),
        extra_entities=tuple(sorted(_display(k) for k in pred_set - gold_keys)),
        missed_facts=tuple(sorted(_show_fact(f) for f in gold_facts - pred_facts)),
        extra_facts=tuple(sorted(_show_fact(f) for f in pred_facts - gold_facts)),
    )


def _show_fact(key: tuple[str, str, str]) -> tuple[str, str, str]:
    return (_display(key[0]), key[2], _display(key[1]))


def _macro(scores: Sequence[PRF]) -> Macro:
    if not scores:
        return Macro(1.0, 1.0, 1.0)
    n = len(scores)
    return Macro(
        precision=sum(s.precision for s in scores) / n,
        recall=sum(s.recall for s in scores) / n,
        f1=sum(s.f1 for s in scores) / n,
    )


def _sum(scores: Iterable[PRF]) -> PRF:
    total = PRF()
    for s in scores:
        total = total + s
    return total


def aggregate(episodes: Sequence[EpisodeScore], unscored: Sequence[str] = ()) -> SetScore:
    """Micro (summed counts) and macro (mean of per-episode values) over episode scores."""

    def pick(attr: str) -> list[PRF]:
        return [getattr(e, attr) for e in episodes]

    return SetScore(
        episodes=tuple(episodes),
        entities=_sum(pick("entities")),
        typed_entities=_sum(pick("typed_entities")),
        facts=_sum(pick("facts")),
        fact_links=_sum(pick("fact_links")),
        macro_entities=_macro(pick("entities")),
        macro_typed_entities=_macro(pick("typed_entities")),
        macro_facts=_macro(pick("facts")),
        macro_fact_links=_macro(pick("fact_links")),
        duplicates=sum(e.duplicates for e in episodes),
        unscored=tuple(sorted(unscored)),
    )


def score_set(
    predicted: Mapping[str, Extraction],
    gold: Mapping[str, Extraction],
    relation_synonyms: Mapping[str, str] | None = None,
    symmetric_relations: Iterable[str] = (),
    ended_facts: bool = True,
) -> SetScore:
    """Score every gold episode (a missing prediction counts as an empty one); predictions
    for episodes without gold are listed in ``unscored`` and otherwise ignored."""
    symmetric = tuple(symmetric_relations)
    scores = [
        score_episode(
            predicted.get(eid, Extraction()),
            gold[eid],
            eid,
            relation_synonyms,
            symmetric,
            ended_facts,
        )
        for eid in sorted(gold)
    ]
    return aggregate(scores, [eid for eid in predicted if eid not in gold])


# --- variants side by side --------------------------------------------------------------
@dataclass(frozen=True)
class VariantUsage:
    """What a variant spent on the scored set (numbers from ``llm_calls``, passed in)."""

    episodes: int
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class VariantRow:
    variant: str
    entity_precision: float
    entity_recall: float
    entity_f1: float
    fact_precision: float
    fact_recall: float
    fact_f1: float
    fact_link_f1: float
    macro_entity_f1: float
    macro_fact_f1: float
    calls_per_episode: float
    tokens_per_episode: float
    cost_per_episode: float
    f1_per_dollar: float | None


def usage_from_llm_calls(calls: Iterable[Mapping[str, Any]], episodes: int) -> VariantUsage:
    """Sum rows of the ``llm_calls`` table (every attempt counts: retries cost money too)."""
    rows = list(calls)
    return VariantUsage(
        episodes=episodes,
        llm_calls=len(rows),
        prompt_tokens=int(sum(r.get("prompt_tokens") or 0 for r in rows)),
        completion_tokens=int(sum(r.get("completion_tokens") or 0 for r in rows)),
        cost_usd=float(sum(r.get("total_cost") or 0.0 for r in rows)),
    )


def tabulate_variants(
    results: Mapping[str, tuple[SetScore, VariantUsage]],
) -> list[VariantRow]:
    """One row per variant (in the mapping's order): micro P/R/F1 for entities and facts,
    macro F1s, and calls, tokens and USD per episode. ``f1_per_dollar`` is the fact F1 per
    USD spent per episode (None when the variant cost nothing)."""
    rows = []
    for name, (score, usage) in results.items():
        if usage.episodes <= 0:
            raise InvalidInput(f"variant {name!r}: usage.episodes must be positive")
        n = usage.episodes
        cost = usage.cost_usd / n
        rows.append(
            VariantRow(
                variant=name,
                entity_precision=score.entities.precision,
                entity_recall=score.entities.recall,
                entity_f1=score.entities.f1,
                fact_precision=score.facts.precision,
                fact_recall=score.facts.recall,
                fact_f1=score.facts.f1,
                fact_link_f1=score.fact_links.f1,
                macro_entity_f1=score.macro_entities.f1,
                macro_fact_f1=score.macro_facts.f1,
                calls_per_episode=usage.llm_calls / n,
                tokens_per_episode=(usage.prompt_tokens + usage.completion_tokens) / n,
                cost_per_episode=cost,
                f1_per_dollar=(score.facts.f1 / cost) if cost > 0 else None,
            )
        )
    return rows


def to_frame(rows: Iterable[Any]) -> pd.DataFrame:
    """A pandas DataFrame of dataclass rows (``VariantRow``, ``EpisodeScore``...)."""
    import dataclasses

    import pandas as pd

    records = []
    for row in rows:
        record = {}
        for f in dataclasses.fields(row):
            value = getattr(row, f.name)
            if isinstance(value, PRF):
                record.update(
                    {
                        f"{f.name}_precision": value.precision,
                        f"{f.name}_recall": value.recall,
                        f"{f.name}_f1": value.f1,
                    }
                )
            else:
                record[f.name] = value
        records.append(record)
    return pd.DataFrame.from_records(records)


# --- predictions from stored rows -------------------------------------------------------
def episode_key(group_id: str, name: str) -> str:
    """The key that joins stored episodes to labelled ones: ``"<group_id>/<name>"``."""
    return f"{group_id}/{name}"


def predictions_from_rows(
    episodes: Iterable[Mapping[str, Any]],
    entities: Iterable[Mapping[str, Any]],
    facts: Iterable[Mapping[str, Any]],
    mentions: Iterable[Mapping[str, Any]],
) -> dict[str, Extraction]:
    """What the pipeline extracted per episode, from rows of the store's tables.

    An episode's entities are those it mentions (``mentions``); its facts are those created
    from it (``facts.episode_uuid``), with their endpoints' names, as they were extracted: a
    fact that a later episode expired (``expired_at`` set) is reported without the
    ``invalid_at`` that expiry gave it. Keys are :func:`episode_key`. Rows are mappings
    (``DataFrame.to_dict("records")`` works).
    """
    names = {e["uuid"]: (e["name"], e.get("entity_type")) for e in entities}
    by_episode: dict[str, list[Entity]] = {}
    for m in mentions:
        if m["entity_uuid"] in names:
            name, etype = names[m["entity_uuid"]]
            by_episode.setdefault(m["episode_uuid"], []).append(Entity(name, etype))
    facts_by: dict[str, list[Fact]] = {}
    for f in facts:
        src, dst = names.get(f["source_uuid"]), names.get(f["target_uuid"])
        if f.get("episode_uuid") and src and dst:
            facts_by.setdefault(f["episode_uuid"], []).append(
                Fact(
                    src[0],
                    dst[0],
                    str(f.get("relation") or "RELATES_TO"),
                    str(f.get("fact") or ""),
                    _time_text(_none_if_nat(f.get("valid_at"))),
                    None
                    if _none_if_nat(f.get("expired_at")) is not None
                    else _time_text(_none_if_nat(f.get("invalid_at"))),
                )
            )
    return {
        episode_key(ep["group_id"], ep["name"]): Extraction(
            tuple(by_episode.get(ep["uuid"], ())), tuple(facts_by.get(ep["uuid"], ()))
        )
        for ep in episodes
    }


def score_generations(
    generations: Mapping[str, Mapping[str, Iterable[Mapping[str, Any]]]],
    gold: Mapping[str, Extraction],
    ended_facts: bool = False,
) -> list[dict[str, Any]]:
    """Per graph (e.g. ``old`` and ``new`` of a re-extraction: rows of ``episodes``,
    ``entities``, ``facts``, ``mentions``), micro P/R/F1 of entities and facts on its
    episodes that have gold; a graph without labelled episodes is left out."""
    out = []
    for name, rows in generations.items():
        predicted = predictions_from_rows(
            rows["episodes"], rows["entities"], rows["facts"], rows["mentions"]
        )
        labelled = {k: gold[k] for k in predicted if k in gold}
        if not labelled:
            continue
        score = score_set({k: predicted[k] for k in labelled}, labelled, ended_facts=ended_facts)
        out.append(
            {
                "graph": name,
                "episodes": len(labelled),
                **{
                    f"{kind}_{metric}": round(getattr(getattr(score, attr), metric), 4)
                    for kind, attr in (("entity", "entities"), ("fact", "facts"))
                    for metric in ("precision", "recall", "f1")
                },
            }
        )
    return out


def _none_if_nat(value: Any) -> Any:
    """pandas gives NaT/NaN for missing timestamps; both are "no value" here."""
    return None if value is None or value != value else value  # NaN/NaT != themselves


def gold_by_key(labelled: Iterable[LabelledEpisode]) -> dict[str, Extraction]:
    """The gold extractions keyed by :func:`episode_key`, to score against
    :func:`predictions_from_rows`."""
    return {episode_key(ep.group_id, ep.name): ep.gold for ep in labelled}


# --- the labelled set -------------------------------------------------------------------
def parse_labelled(lines: Iterable[str]) -> list[LabelledEpisode]:
    """Parse the labelled JSON lines (blank lines skipped); errors name the line number."""
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            out.append(
                LabelledEpisode(
                    id=str(row["id"]),
                    name=str(row["name"]),
                    episode_body=str(row["episode_body"]),
                    group_id=str(row["group_id"]),
                    source=str(row.get("source", "text")),
                    source_description=str(row.get("source_description", "")),
                    reference_time=str(row["reference_time"]),
                    gold=Extraction.from_dict(row),
                )
            )
        except (ValueError, KeyError, TypeError, InvalidInput) as exc:
            raise InvalidInput(f"labelled set line {number}: {exc}") from None
    return out


def load_labelled(path: str | Path) -> list[LabelledEpisode]:
    """Read ``data/extraction_labelled.jsonl`` (or another file in the same format)."""
    with open(path, encoding="utf-8") as handle:
        return parse_labelled(handle)
