"""SQL of provenance: which episodes stated each fact (table ``fact_sources``), which file an
imported fact came from (``fact_imports``), and the reads that quote them.

A fact's first episode is its ``facts.episode_uuid`` and its first ``fact_sources`` row; an
episode that states a stored fact again adds a row (extraction keeps one fact, not a copy).
The reads take the facts (or entities) of one answer at once: one statement whatever their
number, never one per fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from workbench.store import Store

__all__ = [
    "insert_fact_sources",
    "record_restated",
    "insert_fact_imports",
    "delete_of_facts",
    "delete_of_episode",
    "links_of_facts",
    "links_of_entity",
    "quoted_episodes",
]

Row = dict[str, Any]
# group, source, target, fact text, episode, the episode's reference time
RestatedKey = tuple[str, str, str, str, str, datetime]


def insert_fact_sources(store: Store, rows: Sequence[tuple[str, str, datetime]]) -> None:
    """(fact uuid, episode uuid, the episode's reference time) rows of facts just created by
    their episodes."""
    rows = list(dict.fromkeys(rows))
    if rows:
        store.executemany(
            "INSERT INTO fact_sources (fact_uuid, episode_uuid, said_at) VALUES (?, ?, ?)",
            [list(r) for r in rows],
        )


def record_restated(store: Store, keys: Sequence[RestatedKey]) -> None:
    """The episodes that stated a stored (unexpired) fact again: each (group, source uuid,
    target uuid, fact text, episode uuid, its reference time) links the episode to the fact
    of that key (the text compared trimmed and lower-cased, as the duplicate check does).
    One statement; a link stored already is kept."""
    wanted = sorted({(k[0], k[1], k[2], k[3].strip().lower(), k[4], k[5]) for k in keys})
    if not wanted:
        return
    columns = [[w[i] for w in wanted] for i in range(6)]
    store.execute(
        """INSERT INTO fact_sources (fact_uuid, episode_uuid, said_at)
           SELECT DISTINCT f.uuid, p.e, p.w FROM facts f
           JOIN (SELECT unnest($1::VARCHAR[]) AS g, unnest($2::VARCHAR[]) AS s,
                        unnest($3::VARCHAR[]) AS t, unnest($4::VARCHAR[]) AS x,
                        unnest($5::VARCHAR[]) AS e, unnest($6::TIMESTAMPTZ[]) AS w) AS p
             ON f.group_id = p.g AND f.source_uuid = p.s AND f.target_uuid = p.t
                AND lower(trim(f.fact)) = p.x
           WHERE f.expired_at IS NULL
           ON CONFLICT DO NOTHING""",
        columns,
    )


def insert_fact_imports(store: Store, uuids: Sequence[str], file: str, when: datetime) -> None:
    """Imported facts (new rows): the file they came from and the import's time."""
    if uuids:  # a bulk write, as the import's facts (a binary COPY on PostgreSQL)
        n = len(uuids)
        store.insert_arrow(
            "fact_imports",
            pa.table(
                {
                    "fact_uuid": pa.array(list(uuids), pa.string()),
                    "file": pa.array([file] * n, pa.string()),
                    "imported_at": pa.array([when] * n, pa.timestamp("us", "UTC")),
                }
            ),
        )


def delete_of_facts(store: Store, uuids: Sequence[str]) -> None:
    """The provenance rows of deleted facts."""
    if uuids:
        for table in ("fact_sources", "fact_imports"):
            store.execute(
                f"DELETE FROM {table} WHERE fact_uuid IN (SELECT unnest(?::VARCHAR[]))",
                [list(uuids)],
            )


def delete_of_episode(store: Store, uuid: str) -> None:
    """A deleted episode no longer states anything."""
    store.execute("DELETE FROM fact_sources WHERE episode_uuid = ?", [uuid])


def restated_elsewhere(store: Store, episode_uuid: str) -> dict[str, str]:
    """The facts ``episode_uuid`` stated first that another episode stated again: fact uuid
    -> the earliest other episode (by reference time), which becomes the fact's first."""
    rows = store.fetchall(
        """SELECT s.fact_uuid, s.episode_uuid FROM facts f
           JOIN fact_sources s ON s.fact_uuid = f.uuid AND s.episode_uuid <> $1
           WHERE f.episode_uuid = $1
           ORDER BY s.fact_uuid, s.said_at DESC, s.episode_uuid DESC""",
        [episode_uuid],
    )
    return {fact: episode for fact, episode in rows}  # the last row of a fact: its earliest


def move_first_episode(store: Store, firsts: dict[str, str]) -> None:
    """Make each (fact uuid -> episode uuid) the fact's first episode."""
    if firsts:
        store.execute(
            """UPDATE facts SET episode_uuid = v.e
               FROM (SELECT unnest($1::VARCHAR[]) AS uuid, unnest($2::VARCHAR[]) AS e) AS v
               WHERE facts.uuid = v.uuid""",
            [list(firsts), list(firsts.values())],
        )


# --- reads -----------------------------------------------------------------------------------
# Each read looks rows up by an indexed column through ``= ANY(list)``: DuckDB answers that
# from the index (a join or a subquery would scan the table), PostgreSQL too. A search answer
# costs two statements, whatever its number of facts. Times are read as numbers.


def links_of_facts(store: Store, uuids: Sequence[str], imported: Sequence[str] = ()) -> list[Row]:
    """The provenance of these facts: a row per (fact, episode) (``owner``,
    ``episode_uuid``, ``said_at``), and per fact of ``imported`` (those with no first
    episode) that was imported (``owner``, ``file``, ``imported_at``; no episode)."""
    rows: list[Row] = []
    if uuids:
        for owner, episode, said in store.fetchall(
            "SELECT fact_uuid, episode_uuid, epoch_us(said_at) FROM fact_sources "
            "WHERE fact_uuid = ANY(?)",
            [list(uuids)],
        ):
            rows.append({"owner": owner, "episode_uuid": episode, "said_at": _from_us(said)})
    if imported:
        for owner, file, when in store.fetchall(
            "SELECT fact_uuid, file, epoch_us(imported_at) FROM fact_imports "
            "WHERE fact_uuid = ANY(?)",
            [list(imported)],
        ):
            rows.append(
                {"owner": owner, "episode_uuid": None, "file": file, "imported_at": _from_us(when)}
            )
    return rows


def links_of_entity(store: Store, uuid: str) -> list[Row]:
    """The episodes that mention an entity (rows shaped as :func:`links_of_facts`')."""
    rows = store.fetch_dicts(
        "SELECT m.entity_uuid AS owner, m.episode_uuid, e.reference_time AS said_at, "
        "CAST(NULL AS VARCHAR) AS file, CAST(NULL AS TIMESTAMPTZ) AS imported_at "
        "FROM mentions m JOIN episodes e ON e.uuid = m.episode_uuid WHERE m.entity_uuid = ?",
        [uuid],
    )
    return rows


def quoted_episodes(store: Store, episode_uuids: Sequence[str]) -> list[Row]:
    """These episodes (``uuid``, ``name``, ``reference_time``) with their passages
    (``passage_uuid``, ``position``, ``text``; None for an episode without any), by episode
    and position."""
    if not episode_uuids:
        return []
    rows = store.fetchall(
        """SELECT e.uuid, e.name, epoch_us(e.reference_time), p.uuid, p.position, p.text
           FROM (SELECT uuid, name, reference_time FROM episodes WHERE uuid = ANY($1)) AS e
           LEFT JOIN (SELECT uuid, episode_uuid, position, text FROM passages
                      WHERE episode_uuid = ANY($1)) AS p ON p.episode_uuid = e.uuid""",
        [list(episode_uuids)],
    )  # not sorted here: DuckDB's sort costs more than the caller's
    keys = ("uuid", "name", "reference_time", "passage_uuid", "position", "text")
    out = [dict(zip(keys, (u, n, _from_us(t), *rest))) for u, n, t, *rest in rows]
    out.sort(key=lambda r: (r["uuid"], r["position"] if r["position"] is not None else -1))
    return out


def _from_us(value: float | None) -> datetime | None:
    """A time read as microseconds since the epoch (DuckDB converts a TIMESTAMPTZ to Python
    several times slower than a number: a search answer reads these)."""
    return None if value is None else datetime.fromtimestamp(value / 1_000_000, tz=UTC)


def passages_in(store: Store, episode_uuids: Sequence[str]) -> list[Row]:
    """The passages (uuid, episode_uuid, position, text) of these episodes, in order."""
    if not episode_uuids:
        return []
    return store.fetch_dicts(
        "SELECT uuid, episode_uuid, position, text FROM passages "
        "WHERE episode_uuid = ANY(?) ORDER BY episode_uuid, position",
        [list(episode_uuids)],
    )
