"""In-memory rows of the memories, for the search hot path, held as columns.

Why in memory: fetching ~100 candidate rows from DuckDB by uuid costs a table scan (DuckDB 1.5
uses the primary-key index only for single-value lookups), and twice that for the entity-name
joins of facts: alone more than a search's latency budget (figures in ``docs/performance.md``).
So the search engine keeps the columns it filters, scores and returns in memory and reads the
store only when something changed:

* :meth:`RowCache.load` at open (one columnar read), :meth:`RowCache.refresh` for rows written
  by someone else (``SearchEngine.on_upsert`` re-reads the rows it is told about,
  ``refresh_states`` after maintenance re-reads all of them);
* access updates are applied here at once (:meth:`RowCache.access`) and written to the store in
  batches (:mod:`workbench.index.access`).

Why columns: one Python dict per memory cost about 1.5 KB and most of a large store's start-up
(a datetime object, a float, a string per field). Here each memory is a slot: numbers and times
(microseconds since the epoch) in numpy arrays, repeated strings (groups, types, states) as small
integer codes, and only the texts and uuids as Python strings. The filters and the ranking read
the arrays for all candidates at once; a row dict (:meth:`RowCache.get`) is built only for what
a search returns or ingestion reads.

The store stays the source of truth; this is a cache with explicit invalidation.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from workbench.clock import as_utc
from workbench.index.arrays import grouped
from workbench.store import Store
from workbench.store import search as sql
from workbench.store.access import REACTIVATED_FROM

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["NO_END", "NO_TIME", "RowCache", "name_key", "to_micros"]

NO_TIME = np.iinfo(np.int64).min  # a NULL timestamp
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# column -> how it is held, per kind ("uuid" is the slot's key)
_TEXT = {"entity": ("name", "name_norm", "summary"), "fact": ("fact",), "passage": ("text",)}
_SHARED = {  # interned: one string object per value in the process
    "entity": (),
    "fact": ("source_uuid", "target_uuid", "episode_uuid"),
    "passage": ("episode_uuid", "episode_name"),
}
_CODED = {
    "entity": ("group_id", "entity_type", "lifecycle_state"),
    "fact": ("group_id", "relation", "lifecycle_state"),
    "passage": ("group_id", "speaker", "lifecycle_state"),
}
_TIMES = {
    "entity": ("created_at", "updated_at", "last_accessed_at"),
    "fact": ("created_at", "valid_at", "invalid_at", "expired_at", "last_accessed_at"),
    "passage": ("created_at", "reference_time", "last_accessed_at"),
}
_NUMBERS = {"importance": np.int16, "stability": np.int16, "decay_score": np.float64,
            "access_count": np.int64}  # fmt: skip
# numbers only one kind has
_OWN_NUMBERS: dict[str, dict[str, type]] = {"passage": {"position": np.int32}}


class Filters(Protocol):
    """What :meth:`RowCache.accepting` reads of the search filters
    (:class:`~workbench.search.filters.SearchFilters`, a layer above)."""

    @property
    def group_ids(self) -> Collection[str] | None: ...
    @property
    def states(self) -> Collection[str] | None: ...
    @property
    def created_after(self) -> datetime | None: ...
    @property
    def created_before(self) -> datetime | None: ...
    @property
    def entity_types(self) -> Collection[str] | None: ...
    @property
    def relation_types(self) -> Collection[str] | None: ...
    @property
    def include_invalidated(self) -> bool: ...
    @property
    def now(self) -> datetime | None: ...
    @property
    def about_after(self) -> datetime | None: ...
    @property
    def about_before(self) -> datetime | None: ...
    @property
    def as_of(self) -> datetime | None: ...


NO_END = np.iinfo(np.int64).max  # an open end of a validity interval
_MICRO = timedelta(microseconds=1)


def _within(
    when: NDArray[np.int64], after: datetime | None, before: datetime | None
) -> NDArray[np.bool_]:
    keep = np.ones(len(when), dtype=bool)
    if after is not None:
        keep &= when >= to_micros(after)
    if before is not None:
        keep &= when < to_micros(before)
    return keep


def _overlapping(
    start: NDArray[np.int64], end: NDArray[np.int64], after: datetime | None,
    before: datetime | None,
) -> NDArray[np.bool_]:  # fmt: skip
    """Which intervals ``[start, end)`` overlap ``[after, before)`` (None: unbounded); an
    interval that ends where it starts (a point) overlaps when the point is inside."""
    keep = np.ones(len(start), dtype=bool)
    if after is not None:
        at = to_micros(after)
        keep &= (end > at) | ((end == start) & (start >= at))
    if before is not None:
        keep &= start < to_micros(before)
    return keep


def _about(filters: Filters) -> bool:
    """Whether the filters name a window of time the memories are about (a fact valid in a
    past window is kept though superseded since, as with ``as_of``)."""
    return filters.about_after is not None or filters.about_before is not None


def to_micros(value: datetime | None) -> int:
    """A timestamp as microseconds since the epoch (naive means UTC); None -> ``NO_TIME``."""
    if value is None:
        return int(NO_TIME)
    delta = as_utc(value) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _time(micros: int) -> datetime | None:
    return None if micros == NO_TIME else _EPOCH + timedelta(microseconds=int(micros))


class Codes:
    """Strings <-> small integer codes (a column of few distinct values); -1 is None."""

    def __init__(self) -> None:
        self._code: dict[str, int] = {}
        self.names: list[str] = []

    def of(self, value: str | None) -> int:
        if value is None:
            return -1
        code = self._code.get(value)
        if code is None:
            code = self._code[value] = len(self.names)
            self.names.append(value)
        return code

    def name(self, code: int) -> str | None:
        return None if code < 0 else self.names[code]

    def encode(self, column: pa.ChunkedArray) -> NDArray[np.int32]:
        """The codes of an Arrow string column (dictionary-encoded in Arrow, then each
        distinct value coded once)."""
        encoded = column.combine_chunks().dictionary_encode()
        mapping = np.array([self.of(v) for v in encoded.dictionary.to_pylist()] + [-1],
                           dtype=np.int32)  # fmt: skip
        indices = encoded.indices.fill_null(len(mapping) - 1).to_numpy(zero_copy_only=False)
        codes: NDArray[np.int32] = mapping[indices]
        return codes

    def known(self, values: Iterable[str]) -> NDArray[np.int32]:
        """The codes of those of ``values`` ever seen (a value never seen matches nothing)."""
        return np.array([self._code[v] for v in values if v in self._code], dtype=np.int32)


class RowCache:
    """The searchable rows of one memory kind as columns keyed by uuid (see the module doc),
    plus (facts) the facts touching each entity and (entities) the entities of each
    (group, normalised name)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._numbers = {**_NUMBERS, **_OWN_NUMBERS.get(kind, {})}
        self.rows = _RowsView(self)
        self._reset()

    def _reset(self) -> None:
        kind = self.kind
        self._slot: dict[str, int] = {}
        self._uuid: list[str | None] = []
        self._free: list[int] = []
        self._codes = {c: Codes() for c in _CODED[kind]}
        self._texts: dict[str, list[str | None]] = {c: [] for c in _TEXT[kind] + _SHARED[kind]}
        self._arrays: dict[str, np.ndarray] = {
            **{c: np.zeros(0, np.int32) for c in _CODED[kind]},
            **{c: np.zeros(0, np.int64) for c in _TIMES[kind]},
            **{c: np.zeros(0, t) for c, t in self._numbers.items()},
        }
        # entity uuid -> the facts touching it (facts only; a bare uuid when one): touching_of
        self.touching: _Members = {}
        # group + NUL + name_norm -> the entity uuid(s) (as in touching)
        self.named: _Members = {}

    # --- lookups --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._slot

    def uuids(self) -> list[str]:
        return list(self._slot)

    def get(self, uuid: str) -> dict[str, Any] | None:
        """The row as a dict (a fresh copy: changing it changes nothing here)."""
        slot = self._slot.get(uuid)
        return None if slot is None else self._row(slot)

    def value(self, uuid: str, column: str) -> Any:
        """One column of one row (None when the row is not here)."""
        slot = self._slot.get(uuid)
        if slot is None:
            return None
        if column in self._texts:
            return self._texts[column][slot]
        if column in self._codes:
            return self._codes[column].name(int(self._arrays[column][slot]))
        if column in _TIMES[self.kind]:
            return _time(self._arrays[column][slot])
        return self._arrays[column][slot].item()

    def slots(self, uuids: Sequence[str]) -> NDArray[np.int64]:
        """The slots of these uuids, -1 for one not here."""
        get = self._slot.get
        return np.fromiter((get(u, -1) for u in uuids), dtype=np.int64, count=len(uuids))

    def column(self, name: str, slots: NDArray[np.int64]) -> NDArray[Any]:
        """A numeric, time (microseconds) or code column at these slots."""
        values: NDArray[Any] = self._arrays[name][slots]
        return values

    def texts(self, column: str) -> list[str | None]:
        """A text column over every row, in the order of :meth:`uuids`."""
        values = self._texts[column]
        return [values[s] for s in self._slot.values()]

    def group_ids(self) -> list[str]:
        """Each row's group, in the order of :meth:`uuids`."""
        names, codes = self._codes["group_id"].names, self._arrays["group_id"]
        return [names[codes[s]] for s in self._slot.values()]

    def _row(self, slot: int) -> dict[str, Any]:
        row: dict[str, Any] = {"uuid": self._uuid[slot]}
        for column, values in self._texts.items():
            row[column] = values[slot]
        for column, codes in self._codes.items():
            row[column] = codes.name(int(self._arrays[column][slot]))
        for column in _TIMES[self.kind]:
            row[column] = _time(self._arrays[column][slot])
        for column in self._numbers:
            row[column] = self._arrays[column][slot].item()
        return row

    # --- the vectorised filters -----------------------------------------------------------
    def accepting(self, slots: NDArray[np.int64], filters: Filters) -> NDArray[np.bool_]:
        """Which of these slots pass the search filters (a
        :class:`~workbench.search.filters.SearchFilters`): one boolean mask, computed over the
        columns for all of them at once."""
        a = self._arrays
        keep = slots >= 0
        if not len(a["created_at"]):  # nothing here (an empty store, or all just purged)
            return np.zeros(len(slots), dtype=bool)
        slots = np.where(keep, slots, 0)
        if filters.group_ids is not None:
            keep &= np.isin(a["group_id"][slots], self._codes["group_id"].known(filters.group_ids))
        if filters.states is not None:
            codes = self._codes["lifecycle_state"].known(filters.states)
            keep &= np.isin(a["lifecycle_state"][slots], codes)
        created = a["created_at"][slots]
        if filters.created_after is not None:
            keep &= created >= to_micros(filters.created_after)
        if filters.created_before is not None:
            keep &= created < to_micros(filters.created_before)
        if self.kind == "passage":
            if filters.about_after is not None or filters.about_before is not None:
                keep &= _within(self.about(slots)[0], filters.about_after, filters.about_before)
            return keep
        if self.kind == "entity":
            if filters.about_after is not None or filters.about_before is not None:
                # first seen in the window (the searcher adds those with a fact about it)
                keep &= _within(created, filters.about_after, filters.about_before)
            if filters.entity_types:
                codes = self._codes["entity_type"].known(filters.entity_types)
                keep &= np.isin(a["entity_type"][slots], codes)
            return keep
        if filters.relation_types:
            keep &= np.isin(
                a["relation"][slots], self._codes["relation"].known(filters.relation_types)
            )
        if filters.about_after is not None or filters.about_before is not None:
            start, end = self.about(slots)
            keep &= _overlapping(start, end, filters.about_after, filters.about_before)
        if filters.as_of is not None:  # valid then, superseded since or not
            start, end = self.about(slots)
            keep &= _overlapping(start, end, filters.as_of, filters.as_of + _MICRO)
        elif not filters.include_invalidated and not _about(filters):
            keep &= a["expired_at"][slots] == NO_TIME
            invalid = a["invalid_at"][slots]
            if filters.now is None:
                keep &= invalid == NO_TIME
            else:
                keep &= (invalid == NO_TIME) | (invalid > to_micros(filters.now))
        return keep

    def about(self, slots: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The time these memories are about, as microseconds ``[start, end)``: a passage's
        reference time (its creation when it has none) for both; a fact's validity, from its
        ``valid_at`` (else its creation) to its ``invalid_at`` (``NO_END`` when none); an
        entity's creation to ``NO_END``."""
        a = self._arrays
        created = a["created_at"][slots]
        if self.kind == "passage":
            said = a["reference_time"][slots]
            said = np.where(said == NO_TIME, created, said)
            return said, said
        if self.kind == "entity":
            return created, np.full(len(slots), NO_END, dtype=np.int64)
        valid, invalid = a["valid_at"][slots], a["invalid_at"][slots]
        start = np.where(valid == NO_TIME, created, valid)
        return start, np.where(invalid == NO_TIME, NO_END, invalid)

    def uuids_at(self, slots: NDArray[np.int64]) -> list[str]:
        uuid = self._uuid
        return [uuid[s] for s in slots.tolist()]

    def all_slots(self) -> NDArray[np.int64]:
        return np.fromiter(self._slot.values(), dtype=np.int64, count=len(self._slot))

    # --- writing --------------------------------------------------------------------------
    def load(self, store: Store) -> None:
        """Every row of this kind from the store, in one columnar read."""
        self.load_table(sql.load_table(store, self.kind))

    def load_table(self, table: pa.Table) -> None:
        """Every row of this kind from an Arrow table of the store's columns (as
        :func:`~workbench.store.search.load_table` reads them, or :meth:`to_table` wrote)."""
        self._reset()
        n = table.num_rows
        if not n:
            return
        # interned, as the vector and keyword indexes' and the facts' endpoints: one string
        # object per uuid in the process
        uuids = list(map(sys.intern, table.column("uuid").to_pylist()))
        self._uuid = list(uuids)
        self._slot = dict(zip(uuids, range(n)))
        for column in _TEXT[self.kind]:
            self._texts[column] = table.column(column).to_pylist()
        for column in _SHARED[self.kind]:  # entity uuids repeat across facts: one copy each
            intern = sys.intern
            self._texts[column] = [v if v is None else intern(v)
                                   for v in table.column(column).to_pylist()]  # fmt: skip
        for column in _CODED[self.kind]:
            self._arrays[column] = self._codes[column].encode(table.column(column))
        for column in _TIMES[self.kind]:
            self._arrays[column] = sql.micros(table.column(column), NO_TIME)
        for column, dtype in self._numbers.items():
            self._arrays[column] = table.column(column).to_numpy().astype(dtype)
        self._link_all(uuids)

    def to_table(self) -> pa.Table:
        """Every row as an Arrow table of the store's columns (what :meth:`load_table` reads
        back: a snapshot of this cache). The caller holds the rows still meanwhile."""
        import pyarrow as pa
        import pyarrow.compute as pc

        slots = self.all_slots()
        columns: dict[str, pa.Array] = {"uuid": pa.array(self.uuids_at(slots), pa.string())}
        for column, values in self._texts.items():
            columns[column] = pa.array([values[s] for s in slots.tolist()], pa.string())
        for column, codes in self._codes.items():
            indices = pa.array(self._arrays[column][slots], pa.int32())
            indices = pc.if_else(pc.less(indices, 0), None, indices)
            columns[column] = pa.DictionaryArray.from_arrays(
                indices, pa.array(codes.names, pa.string())
            ).cast(pa.string())
        for column in _TIMES[self.kind]:
            micros = self._arrays[column][slots]
            columns[column] = pa.array(micros, pa.int64(), mask=micros == NO_TIME).cast(
                pa.timestamp("us", "UTC")
            )
        for column in self._numbers:
            columns[column] = pa.array(self._arrays[column][slots])
        return pa.table(columns)

    def _link_all(self, uuids: list[str]) -> None:
        """:meth:`_link` of every row just loaded (slot = position), in bulk."""
        if self.kind == "passage":
            return
        if self.kind == "fact":
            self.touching = grouped(
                self._texts["source_uuid"] + self._texts["target_uuid"], uuids + uuids
            )
            return
        names = self._codes["group_id"].names
        groups = [names[c] for c in self._arrays["group_id"].tolist()]
        keys = [name_key(g, n or "") for g, n in zip(groups, self._texts["name_norm"])]
        self.named = grouped(keys, uuids)

    def refresh(self, store: Store, uuids: Sequence[str]) -> tuple[list[dict[str, Any]], list[str]]:
        """Re-read these rows; return (rows now present, uuids no longer in the store)."""
        rows = sql.load_rows(store, self.kind, list(uuids))
        found = {r["uuid"] for r in rows}
        gone = [u for u in uuids if u not in found]
        self.remove(gone)
        self.put(rows)
        return rows, gone

    def put(self, rows: Iterable[dict[str, Any]]) -> None:
        """Insert or replace these rows (dicts with every column)."""
        for row in rows:
            uuid = row["uuid"]
            slot = self._slot.get(uuid)
            if slot is not None:
                self._unlink(slot)
            else:
                slot = self._new_slot(uuid)
            for column, values in self._texts.items():
                value = row.get(column)
                values[slot] = (
                    sys.intern(value) if column in _SHARED[self.kind] and value else value
                )
            for column, codes in self._codes.items():
                self._arrays[column][slot] = codes.of(row.get(column))
            for column in _TIMES[self.kind]:
                self._arrays[column][slot] = to_micros(row.get(column))
            for column in self._numbers:
                self._arrays[column][slot] = row.get(column) or 0
            self._link(slot)

    def remove(self, uuids: Iterable[str]) -> None:
        for uuid in uuids:
            slot = self._slot.pop(uuid, None)
            if slot is None:
                continue
            self._unlink(slot, uuid)
            self._uuid[slot] = None
            for values in self._texts.values():
                values[slot] = None
            self._free.append(slot)

    def access(self, uuids: Iterable[str], when: datetime, count: int = 1) -> None:
        """Apply ``count`` accesses at ``when`` to these rows (those still here): the latest
        access time, the count, decay 0, DORMANT/ARCHIVED -> ACTIVE (see
        :mod:`workbench.index.access`)."""
        slots = self.slots(list(uuids))
        slots = slots[slots >= 0]
        if not len(slots):
            return
        a, at = self._arrays, to_micros(when)
        a["last_accessed_at"][slots] = np.maximum(a["last_accessed_at"][slots], at)
        a["access_count"][slots] += count
        a["decay_score"][slots] = 0.0
        states = self._codes["lifecycle_state"]
        asleep = states.known(REACTIVATED_FROM)
        if len(asleep):
            states_at = a["lifecycle_state"][slots]
            a["lifecycle_state"][slots] = np.where(
                np.isin(states_at, asleep), states.of("ACTIVE"), states_at
            )

    def _new_slot(self, uuid: str) -> int:
        if self._free:
            slot = self._free.pop()
            self._uuid[slot] = uuid
        else:
            slot = len(self._uuid)
            self._uuid.append(uuid)
            for values in self._texts.values():
                values.append(None)
            if slot >= len(self._arrays["created_at"]):
                size = max(16, 2 * slot)
                for column, array in self._arrays.items():
                    grown = np.zeros(size, dtype=array.dtype)
                    grown[: len(array)] = array
                    self._arrays[column] = grown
        self._slot[uuid] = slot
        return slot

    def _link(self, slot: int) -> None:
        uuid = cast(str, self._uuid[slot])  # a slot in use holds its row's uuid
        if self.kind == "passage":
            return
        if self.kind == "fact":
            source, target = self._ends_at(slot)
            _add(self.touching, source, uuid)
            _add(self.touching, target, uuid)
            return
        _add(self.named, self._name_key(slot), uuid)

    def _unlink(self, slot: int, uuid: str | None = None) -> None:
        uuid = uuid or cast(str, self._uuid[slot])  # a slot in use holds its row's uuid
        if self.kind == "passage":
            return
        if self.kind == "entity":
            _discard(self.named, self._name_key(slot), uuid)
            return
        for end in self._ends_at(slot):
            _discard(self.touching, end, uuid)

    def _name_key(self, slot: int) -> str:
        group = self._codes["group_id"].name(int(self._arrays["group_id"][slot]))
        return name_key(group or "", self._texts["name_norm"][slot] or "")

    # --- graph lookups --------------------------------------------------------------------
    def named_uuids(self, group_id: str, name_norm: str) -> list[str]:
        """The entities of ``group_id`` whose normalised name is ``name_norm``."""
        return list(_members(self.named, name_key(group_id, name_norm)))

    def touching_of(self, entity_uuid: str) -> Collection[str]:
        """The uuids of the facts touching this entity (facts only; do not modify)."""
        return _members(self.touching, entity_uuid)

    def ends(self, uuid: str) -> tuple[str, str] | None:
        """A fact's (source, target) entity uuids."""
        slot = self._slot.get(uuid)
        if slot is None:
            return None
        return self._ends_at(slot)

    def _ends_at(self, slot: int) -> tuple[str, str]:
        """The (source, target) entity uuids of the fact at ``slot`` (NOT NULL columns)."""
        texts = self._texts
        return cast(str, texts["source_uuid"][slot]), cast(str, texts["target_uuid"][slot])

    def neighbourhood(self, entity_uuid: str, limit: int = 1000) -> tuple[list[str], set[str]]:
        """Facts touching the entity (newest first, at most ``limit``) and its neighbours."""
        uuids = list(self.touching_of(entity_uuid))
        created = self._arrays["created_at"][self.slots(uuids)]
        order = np.argsort(-created, kind="stable")[:limit]
        facts = [uuids[i] for i in order]
        ends = {e for u in facts for e in self._ends_at(self._slot[u])}
        ends.discard(entity_uuid)
        return facts, ends


class _RowsView(Mapping[str, dict[str, Any]]):
    """``cache.rows``: the rows as a read-only mapping uuid -> row dict (built on access)."""

    def __init__(self, cache: RowCache):
        self._cache = cache

    def __getitem__(self, uuid: str) -> dict[str, Any]:
        row = self._cache.get(uuid)
        if row is None:
            raise KeyError(uuid)
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._cache._slot))

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._cache


# key -> a bare uuid, the set of them when several share it, or a tuple of them as a bulk load
# left it (:func:`~workbench.index.arrays.grouped`; a set once it changes)
_Members = dict[str, str | set[str] | tuple[str, ...]]


def _add(index: _Members, key: str, uuid: str) -> None:
    """Add ``uuid`` under ``key``: a bare uuid, or the set of them when several share it (a
    bare string instead of a one-member set saves ~200 bytes: most names are one entity's,
    and many entities have one fact). A bulk load leaves tuples (:func:`grouped`), made a
    set when they first change."""
    same = index.get(key)
    if same is None:
        index[key] = uuid
    elif isinstance(same, set):
        same.add(uuid)
    elif isinstance(same, tuple):
        index[key] = {*same, uuid}
    elif same != uuid:
        index[key] = {same, uuid}


def _discard(index: _Members, key: str, uuid: str) -> None:
    same = index.get(key)
    if same == uuid:
        del index[key]
    elif isinstance(same, set | tuple):
        rest = same if isinstance(same, set) else set(same)
        rest.discard(uuid)
        index[key] = next(iter(rest)) if len(rest) == 1 else rest


def _members(index: _Members, key: str) -> Collection[str]:
    same = index.get(key)
    if same is None:
        return ()
    return (same,) if isinstance(same, str) else same


def name_key(group_id: str, name_norm: str) -> str:
    return f"{group_id}\x00{name_norm}"
