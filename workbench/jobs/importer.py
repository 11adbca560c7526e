"""Import pre-extracted entities and facts (JSON lines or Parquet), no LLM.

Record formats (``docs/import-format.md``; in Parquet, one row per record, the same columns)::

    {"type": "entity", "name": ..., "entity_type"?, "summary"?, "group_id"?, "importance"?,
     "stability"?, "created_at"?, "embedding"?}
    {"type": "fact", "source": ..., "target": ..., "relation"?, "fact": ..., "valid_at"?,
     "invalid_at"?, "group_id"?, "created_at"?, "importance"?, "stability"?, "embedding"?}

A record with an ``embedding`` (of the database's size) keeps that vector and is not embedded
again: a migration from another store, or a re-import, costs no model time.

Facts name their endpoint entities, which are created when missing. Entities are deduplicated
by normalised name within a group, exactly as ingestion does. A bad line is reported with its
number and skipped; the good lines are imported.
"""

from __future__ import annotations

import json
import sys
import uuid as uuidlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, Protocol

import numpy as np
import pyarrow as pa
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from workbench.clock import Clock, TimeOutOfRange, as_utc
from workbench.embedding import Embedder
from workbench.errors import InvalidInput
from workbench.index.publish import Publisher
from workbench.ingest.records import entity_text
from workbench.names import GROUP_ID_RULE, is_group_id, name_key, relation_name
from workbench.results import ImportResult
from workbench.store import Store, bulk, provenance
from workbench.store import graph as g

# lines per chunk, one transaction each: a DuckDB commit costs about as much as writing a
# few hundred rows, so larger chunks halved a 200k-row import (docs/performance.md)
BATCH = 2048
PARQUET_BATCH = 4096  # rows DuckDB hands over at a time
Row = dict[str, Any]  # a row of ``entities`` or ``facts`` as ``store.graph`` writes it
ENTITIES_FILE = "entities.parquet"  # beside an imported file: its entities, imported first


def _vector(value: object) -> np.ndarray | None:
    """An ``embedding`` (a list of numbers, or the array a Parquet column gives) as float32:
    a record is held until its chunk is written, and a list of Python floats would take
    eight times the memory."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise ValueError("must be a non-empty list of finite numbers")
    try:
        vector = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError("must be a non-empty list of finite numbers") from None
    if vector.ndim != 1 or not vector.size or not np.isfinite(vector).all():
        raise ValueError("must be a non-empty list of finite numbers")
    return vector


class _Base(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)  # the float32 ``embedding``

    group_id: str | None = None
    importance: int | None = Field(default=None, ge=1, le=5)
    stability: int | None = Field(default=None, ge=1, le=5)
    created_at: str | None = None
    # its vector, of the database's size (then it is not embedded again)
    embedding: Annotated[np.ndarray | None, BeforeValidator(_vector)] = None

    @field_validator("group_id")
    @classmethod
    def _group(cls, value: str | None) -> str | None:
        """The one rule for group names (``workbench.names``): what ``add_memory`` refuses,
        an import line cannot create."""
        if value is not None and not is_group_id(value):
            raise ValueError(f"not a valid group name: {GROUP_ID_RULE}")
        return value

    @field_validator("*")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        """No text of a line holds a NUL character (PostgreSQL cannot store one: refused on
        both backends alike)."""
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("contains a NUL character (U+0000), which cannot be stored")
        return value

    @field_validator("created_at")
    @classmethod
    def _time(cls, value: str | None) -> str | None:
        return _checked_time(value)


class EntityLine(_Base):
    type: str = "entity"
    name: str = Field(min_length=1, max_length=200)
    entity_type: str = "Entity"
    summary: str = ""


class FactLine(_Base):
    type: str = "fact"
    source: str = Field(min_length=1, max_length=200)
    target: str = Field(min_length=1, max_length=200)
    relation: str = "RELATES_TO"
    fact: str = Field(min_length=1, max_length=2000)
    valid_at: str | None = None
    invalid_at: str | None = None

    @field_validator("valid_at", "invalid_at")
    @classmethod
    def _times(cls, value: str | None) -> str | None:
        return _checked_time(value)


_MODELS: dict[str, type[EntityLine] | type[FactLine]] = {"entity": EntityLine, "fact": FactLine}


def _checked_time(value: str | None) -> str | None:
    """``value`` when it reads as a time (ISO 8601, within years 1-9999 in UTC)."""
    if value is not None:
        try:
            as_utc(value)
        except TimeOutOfRange as exc:
            raise ValueError(f"out of range: {exc}") from None
        except ValueError:
            raise ValueError("not an ISO 8601 time such as 2025-03-01T12:00:00Z") from None
    return value


@dataclass
class ImportReport:
    entities_created: int = 0
    entities_existing: int = 0
    facts_created: int = 0
    facts_existing: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> ImportResult:
        return {
            "entities_created": self.entities_created,
            "entities_existing": self.entities_existing,
            "facts_created": self.facts_created,
            "facts_existing": self.facts_existing,
            "errors": self.errors[:100],
            "error_count": len(self.errors),
        }


def read_lines(
    source: str | Path | Iterable[str] | Iterable[Row], first_line: int = 1, arrays: bool = False
) -> Iterable[tuple[int, Any]]:
    """Yield (line number, raw item) from a path (JSON lines, or Parquet: a row is a line), an
    iterable of JSON strings, or dicts (numbered from ``first_line``: a chunk of a file keeps
    the file's line numbers). With ``arrays``, a Parquet ``embedding`` comes as a float32
    array (for :func:`parse`), otherwise as a list (JSON, to send to a service)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise InvalidInput(f"import file not found: {path}")
        if is_parquet(path):
            yield from _parquet_rows(path, first_line, arrays)
            return
        with path.open("rb") as handle:
            for number, raw in enumerate(handle, start=first_line):
                yield number, _decoded(raw, number, path)
        return
    yield from enumerate(source, start=first_line)


def is_parquet(path: Path) -> bool:
    """A Parquet file (by its magic bytes, whatever its name)."""
    with path.open("rb") as handle:
        return handle.read(4) == b"PAR1"


def _parquet_rows(path: Path, first_line: int, arrays: bool) -> Iterable[tuple[int, Row]]:
    """The rows of a Parquet file as import records, in batches (a timestamp becomes an ISO
    text; with ``arrays``, an ``embedding`` column comes as float32 arrays, not as lists of
    Python floats: those cost more than the rest of a row)."""
    number = first_line
    for batch in bulk.parquet_batches(path, PARQUET_BATCH):
        vectors = _vector_column(batch) if arrays else None
        columns = [c for c in batch.schema.names if c != "embedding" or vectors is None]
        for i, row in enumerate(batch.select(columns).to_pylist()):
            record = {k: _plain(v) for k, v in row.items() if v is not None}
            if vectors is not None and vectors[i] is not None:
                record["embedding"] = vectors[i]
            yield number, record
            number += 1


def _vector_column(batch: pa.RecordBatch) -> list[np.ndarray | None] | None:
    """The batch's ``embedding`` column as one float32 array a row (None where null), or None
    when it has no such column of numbers (then its values are validated as they are)."""
    if "embedding" not in batch.schema.names:
        return None
    column = batch.column("embedding")
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_fixed_size_list(kind)):
        return None
    if not pa.types.is_floating(kind.value_type) and not pa.types.is_integer(kind.value_type):
        return None
    values = column.to_numpy(zero_copy_only=False)
    return [None if v is None else np.asarray(v, np.float32) for v in values]


def _plain(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _decoded(raw: bytes, number: int, path: Path) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"{path} is not a JSON-lines text file: line {number} is not UTF-8 text"
        ) from None


def parse(
    items: Iterable[tuple[int, Any]], report: ImportReport, dim: int | None = None
) -> list[EntityLine | FactLine]:
    """The valid records; each bad one is reported with its line number (a record whose
    ``embedding`` is not of ``dim`` dimensions too) and skipped."""
    parsed: list[EntityLine | FactLine] = []
    for number, raw in items:
        if isinstance(raw, str):
            if not raw.strip():
                continue
            try:
                raw = json.loads(raw)
            except json.JSONDecodeError as exc:
                report.errors.append(f"line {number}: not JSON ({exc.msg})")
                continue
            except ValueError:  # an integer of more digits than Python reads
                report.errors.append(
                    f"line {number}: a number has more than {sys.get_int_max_str_digits()} digits"
                )
                continue
        if not isinstance(raw, dict):
            report.errors.append(f"line {number}: expected a JSON object")
            continue
        kind = raw.get("type")
        model: type[EntityLine] | type[FactLine] | None = _MODELS.get(str(kind))
        if model is None:
            report.errors.append(f"line {number}: 'type' must be 'entity' or 'fact'")
            continue
        try:
            line = model.model_validate(raw)
            if dim is not None and line.embedding is not None and len(line.embedding) != dim:
                report.errors.append(
                    f"line {number}: embedding has {len(line.embedding)} dimensions; the "
                    f"database holds {dim}-dimensional vectors"
                )
                continue
            parsed.append(line)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            message = str(first["msg"]).removeprefix("Value error, ")
            report.errors.append(f"line {number}: {where}: {message}")
    return parsed


def entities_beside(
    source: str | Path | Iterable[Any], report: ImportReport, dim: int | None = None
) -> list[EntityLine | FactLine]:
    """The records of an ``entities.parquet`` in the folder of a file imported (a row is an
    entity record, ``type`` optional; its errors name that file), imported before the file's
    own lines: a migration brings its entities' vectors there, and needs no model."""
    beside = entities_file(source)
    if beside is None:
        return []
    own = ImportReport()
    lines = parse(beside_records(beside, arrays=True), own, dim)
    report.errors += [f"{ENTITIES_FILE} {error}" for error in own.errors]
    return lines


def entities_file(source: str | Path | Iterable[Any]) -> Path | None:
    """The ``entities.parquet`` beside an imported file, if there is one."""
    if not isinstance(source, (str, Path)):
        return None
    beside = Path(source).with_name(ENTITIES_FILE)
    if beside.name == Path(source).name or not beside.is_file():
        return None
    if not is_parquet(beside):
        raise InvalidInput(f"{beside} is not a Parquet file (an {ENTITIES_FILE} must be one)")
    return beside


def beside_records(beside: Path, arrays: bool = False) -> Iterable[tuple[int, Row]]:
    """The rows of an ``entities.parquet`` as entity records (``type`` optional there)."""
    for number, raw in _parquet_rows(beside, 1, arrays):
        yield number, {"type": "entity", **raw}


class Importer:
    def __init__(
        self, store: Store, embedder: Embedder, clock: Clock, default_group: str, index: Publisher
    ):
        self.store = store
        self.embedder = embedder
        self.clock = clock
        self.default_group = default_group
        self.index = index  # told of each chunk after its commit, under its gate
        self.file = "import"  # what the imported facts' provenance names (set by run)

    def run(
        self,
        source: str | Path | Iterable[Any],
        progress: bool = False,
        first_line: int = 1,
        file: str | None = None,
    ) -> ImportReport:
        """Import ``source``; ``file`` names it in the facts' provenance (default: a path's
        file name, else ``import``)."""
        report = ImportReport()
        if file is None:
            file = Path(source).name if isinstance(source, (str, Path)) else "import"
        self.file = file
        lines = entities_beside(source, report, self.embedder.dimensions)
        records = read_lines(source, first_line, arrays=True)
        lines += parse(records, report, self.embedder.dimensions)
        bar = _progress(len(lines), progress)
        with self.store.bulk_writes(), self.index.bulk():
            for start in range(0, len(lines), BATCH):
                chunk = lines[start : start + BATCH]
                self._import_chunk(chunk, report)
                bar.update(len(chunk))
        bar.close()
        return report

    def _import_chunk(self, chunk: list[EntityLine | FactLine], report: ImportReport) -> None:
        """Plan the chunk against the stored graph and embed what it adds (outside any lock:
        model time), then settle the plan inside the write's transaction, with the chunk's
        groups locked: what another import or an episode wrote meanwhile is reused, not
        made twice."""
        commits = self.store.commits
        plan = self._plan(chunk)
        vectors = self._vectors(plan)
        with self.index:
            with self.store.transaction():
                self.store.lock_groups(plan.groups)
                # a file only this process writes, unchanged since the plan's reads: settled
                # (a bulk import alone skips the second look, a scan of the facts)
                if self.store.shared or self.store.commits != commits:
                    plan.settle(self.store)
                dim = self.embedder.dimensions
                ent_vecs = _rows_of(vectors, [e["uuid"] for e in plan.new_entities], dim)
                fact_vecs = _rows_of(vectors, [f["uuid"] for f in plan.facts], dim)
                self._insert(plan, ent_vecs, fact_vecs)
            # committed already: extraction reads the graph from the search rows, which must
            # not miss these (the next episode would create them again); the rows are
            # complete, as stored: nothing is read back
            self.index.inserted_with_vectors(
                [("entity", plan.new_entities, ent_vecs), ("fact", plan.facts, fact_vecs)],
                "an import",
            )
        plan.count(report)

    def _plan(self, chunk: list[EntityLine | FactLine]) -> _ChunkPlan:
        """The chunk's new entities and facts against the graph as it is stored now: its
        names resolved by one statement, its facts checked by another (only those between
        two stored entities: a fact naming an entity this chunk creates cannot be stored)."""
        now = self.clock()
        plan = _ChunkPlan()
        stored = bulk.entity_uuids(self.store, list(self._keys(chunk)))
        entities: dict[tuple[str, str], str] = {}  # (group, norm) -> uuid (new or stored)

        def entity(group: str, name: str, line: EntityLine | None = None) -> str:
            key = (group, name_key(name))
            if key in entities:
                return entities[key]
            if key in stored:
                plan.entities_existing += 1
                entities[key] = stored[key]
                return stored[key]
            row = _entity_row(group, name, line, key[1], now)
            if line is not None and line.embedding is not None:
                plan.given[row["uuid"]] = line.embedding
            entities[key] = row["uuid"]
            plan.new_entities.append(row)
            return str(row["uuid"])

        seen_facts: set[tuple[str, str, str, str]] = set()
        candidates: list[tuple[tuple[str, str, str, str], Row]] = []
        for line in chunk:
            group = line.group_id or self.default_group
            if isinstance(line, EntityLine):
                entity(group, line.name, line)
                continue
            src, dst = entity(group, line.source), entity(group, line.target)
            key = (group, src, dst, line.fact.strip().lower())
            if key in seen_facts:
                plan.facts_existing += 1
                continue
            seen_facts.add(key)
            row = _fact_row(group, src, dst, line, now)
            if line.embedding is not None:
                plan.given[row["uuid"]] = line.embedding
            candidates.append((key, row))
        known = set(stored.values())
        # a shared store is checked again inside the write (``settle``): here only the facts
        # the model would embed (a duplicate found now costs no model time later)
        again = self.store.shared
        found = g.existing_facts(
            self.store,
            [k for k, row in candidates
             if {k[1], k[2]} <= known and not (again and row["uuid"] in plan.given)],
        )  # fmt: skip
        for key, row in candidates:
            if key in found:
                plan.facts_existing += 1
            else:
                plan.facts.append(row)
        return plan

    def _keys(self, chunk: list[EntityLine | FactLine]) -> Iterator[tuple[str, str]]:
        """(group, normalised name) of every entity the chunk names."""
        for line in chunk:
            group = line.group_id or self.default_group
            names = [line.name] if isinstance(line, EntityLine) else [line.source, line.target]
            for name in names:
                yield group, name_key(name)

    def _vectors(self, plan: _ChunkPlan) -> dict[str, np.ndarray]:
        """uuid -> vector of every row the plan adds: embedded here, or the one its record
        brought (normalised like the embedder's own)."""
        rows = [(e["uuid"], _text(e)) for e in plan.new_entities]
        rows += [(f["uuid"], f["fact"]) for f in plan.facts]
        todo = [(uuid, text) for uuid, text in rows if uuid not in plan.given]
        vectors: dict[str, np.ndarray] = {}
        if todo:
            embedded = self.embedder.embed([text for _, text in todo])
            vectors.update(zip([uuid for uuid, _ in todo], np.asarray(embedded, np.float32)))
        for uuid, _ in rows:
            if uuid in plan.given:
                vector = np.asarray(plan.given[uuid], np.float32)
                norm = float(np.linalg.norm(vector))
                vectors[uuid] = vector / norm if norm > 0 else vector
        return vectors

    def _insert(self, plan: _ChunkPlan, ent_vecs: np.ndarray, fact_vecs: np.ndarray) -> None:
        """The chunk's new rows and their vectors, each table in one bulk write (new uuids:
        nothing to update)."""
        bulk.insert_entities(self.store, plan.new_entities)
        bulk.insert_facts(self.store, plan.facts)
        provenance.insert_fact_imports(
            self.store, [f["uuid"] for f in plan.facts], self.file, self.clock()
        )
        model = self.embedder.model
        uuids = [e["uuid"] for e in plan.new_entities]
        bulk.insert_new_vectors(self.store, "entity", uuids, ent_vecs, model)
        uuids = [f["uuid"] for f in plan.facts]
        bulk.insert_new_vectors(self.store, "fact", uuids, fact_vecs, model)


@dataclass
class _ChunkPlan:
    """What one chunk adds: new entity and fact rows, the vectors records brought (uuid ->
    vector), and how many of its entities and facts exist already."""

    new_entities: list[Row] = field(default_factory=list)
    facts: list[Row] = field(default_factory=list)
    given: dict[str, np.ndarray] = field(default_factory=dict)
    entities_existing: int = 0
    facts_existing: int = 0

    @property
    def groups(self) -> list[str]:
        return sorted({r["group_id"] for r in [*self.new_entities, *self.facts]})

    def settle(self, store: Store) -> None:
        """Inside the write's transaction, its groups locked: an entity someone made since
        the plan was read is used instead of a new one (its facts re-pointed), and a fact
        someone stored meanwhile is not stored again."""
        made = g.entities_by_key(
            store, [(e["group_id"], e["name_norm"]) for e in self.new_entities]
        )
        if made:
            ours = {e["uuid"]: made.get((e["group_id"], e["name_norm"])) for e in self.new_entities}
            same = {uuid: row["uuid"] for uuid, row in ours.items() if row is not None}
            self.new_entities = [e for e in self.new_entities if e["uuid"] not in same]
            self.entities_existing += len(same)
            for fact in self.facts:
                fact["source_uuid"] = same.get(fact["source_uuid"], fact["source_uuid"])
                fact["target_uuid"] = same.get(fact["target_uuid"], fact["target_uuid"])
        # a fact naming an entity this write creates (a uuid no one else knows) cannot be
        # stored already: only those between two stored entities are looked for
        creating = {e["uuid"] for e in self.new_entities}
        keys = [_fact_key(f) for f in self.facts]
        stored = g.existing_facts(
            store, [k for k in keys if k[1] not in creating and k[2] not in creating]
        )
        if stored:
            self.facts = [f for f, key in zip(self.facts, keys) if key not in stored]
            self.facts_existing += len(keys) - len(self.facts)

    def count(self, report: ImportReport) -> None:
        report.entities_created += len(self.new_entities)
        report.entities_existing += self.entities_existing
        report.facts_created += len(self.facts)
        report.facts_existing += self.facts_existing


def _fact_key(fact: Row) -> tuple[str, str, str, str]:
    return (fact["group_id"], fact["source_uuid"], fact["target_uuid"], fact["fact"])


def _text(entity: Row) -> str:
    return entity_text(entity["name"], entity["entity_type"], entity["summary"])


def _rows_of(vectors: dict[str, np.ndarray], uuids: list[str], dim: int) -> np.ndarray:
    if not uuids:
        return np.zeros((0, dim), np.float32)
    return np.vstack([vectors[u] for u in uuids]).astype(np.float32)


# what the store holds of a new memory's other columns (their defaults): a row the importer
# writes is complete, so the search indexes take it as it is (``Publisher.inserted_with_vectors``)
_NEW_MEMORY: Row = {
    "lifecycle_state": "ACTIVE",
    "decay_score": 0.0,
    "last_accessed_at": None,
    "access_count": 0,
}


def _entity_row(group: str, name: str, line: EntityLine | None, norm: str, now: datetime) -> Row:
    given = line is not None and line.importance is not None and line.stability is not None
    created = as_utc(line.created_at) if line and line.created_at else now
    return {
        "uuid": str(uuidlib.uuid4()),
        "group_id": group,
        "name": name.strip(),
        "name_norm": norm,
        "entity_type": line.entity_type if line else "Entity",
        "summary": line.summary if line else "",
        "created_at": created,
        "updated_at": created,
        "importance": (line.importance if line and line.importance else 3),
        "stability": (line.stability if line and line.stability else 3),
        "classification_status": "provided" if given else None,
        **_NEW_MEMORY,
    }


def _fact_row(group: str, src: str, dst: str, line: FactLine, now: datetime) -> Row:
    given = line.importance is not None and line.stability is not None
    return {
        "uuid": str(uuidlib.uuid4()),
        "group_id": group,
        "source_uuid": src,
        "target_uuid": dst,
        "relation": relation_name(line.relation),
        "fact": line.fact.strip(),
        "episode_uuid": None,
        "created_at": as_utc(line.created_at) if line.created_at else now,
        "valid_at": as_utc(line.valid_at),
        "invalid_at": as_utc(line.invalid_at),
        "expired_at": None,
        "importance": line.importance or 3,
        "stability": line.stability or 3,
        "classification_status": "provided" if given else None,
        **_NEW_MEMORY,
    }


class _Bar(Protocol):
    def update(self, n: int) -> None: ...
    def close(self) -> None: ...


class _NoBar:
    def update(self, n: int) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, enabled: bool) -> _Bar:
    if not enabled:
        return _NoBar()
    from tqdm.auto import tqdm

    bar: _Bar = tqdm(total=total, desc="import", unit="record")
    return bar
