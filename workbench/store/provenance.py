"""SQL of provenance: which episodes stated each fact (table ``fact_sources``), which file an
imported fact came from (``fact_imports``), and the reads that quote them.

A fact's first episode is its ``facts.episode_uuid`` and its first ``fact_sources`` row; an
episode that states a stored fact again adds a row (extraction keeps one fact, not a copy).
The reads take the facts (or entities) of one answer at once: one statement whatever their
number, never one per fact.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
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
    "episodes_named",
    "passages_in",
]

Row = dict[str, Any]
RestatedKey = tuple[str, str, str, str, str]  # group, source, target, fact text, episode


def insert_fact_sources(store: Store, rows: Sequence[tuple[str, str, datetime]]) -> None:
    """(fact uuid, episode uuid, when) rows of facts just created by their episodes."""
    rows = list(dict.fromkeys(rows))
    if rows:
        store.executemany(
            "INSERT INTO fact_sources (fact_uuid, episode_uuid, created_at) VALUES (?, ?, ?)",
            [list(r) for r in rows],
        )


def record_restated(store: Store, keys: Sequence[RestatedKey], now: datetime) -> None:
    """The episodes that stated a stored (unexpired) fact again: each (group, source uuid,
    target uuid, fact text, episode uuid) links the episode to the fact of that key (the text
    compared trimmed and lower-cased, as the duplicate check does). One statement; a link
    stored already is kept."""
    wanted = sorted({(k[0], k[1], k[2], k[3].strip().lower(), k[4]) for k in keys})
    if not wanted:
        return
    columns = [[w[i] for w in wanted] for i in range(5)]
    store.execute(
        """INSERT INTO fact_sources (fact_uuid, episode_uuid, created_at)
           SELECT DISTINCT f.uuid, p.e, $6::TIMESTAMPTZ FROM facts f
           JOIN (SELECT unnest($1::VARCHAR[]) AS g, unnest($2::VARCHAR[]) AS s,
                        unnest($3::VARCHAR[]) AS t, unnest($4::VARCHAR[]) AS x,
                        unnest($5::VARCHAR[]) AS e) AS p
             ON f.group_id = p.g AND f.source_uuid = p.s AND f.target_uuid = p.t
                AND lower(trim(f.fact)) = p.x
           WHERE f.expired_at IS NULL
           ON CONFLICT DO NOTHING""",
        [*columns, now],
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
        """SELECT s.fact_uuid, e.uuid FROM facts f
           JOIN fact_sources s ON s.fact_uuid = f.uuid AND s.episode_uuid <> $1
           JOIN episodes e ON e.uuid = s.episode_uuid
           WHERE f.episode_uuid = $1
           ORDER BY s.fact_uuid, e.reference_time DESC, e.uuid DESC""",
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
# costs three such look-ups, whatever its number of facts.


def links_of_facts(store: Store, uuids: Sequence[str]) -> list[Row]:
    """The provenance of these facts: a row per (fact, episode) (``owner``,
    ``episode_uuid``) and per imported fact (``owner``, ``file``, ``imported_at``)."""
    if not uuids:
        return []
    return store.fetch_dicts(
        """SELECT fact_uuid AS owner, episode_uuid, CAST(NULL AS VARCHAR) AS file,
                  CAST(NULL AS TIMESTAMPTZ) AS imported_at
           FROM fact_sources WHERE fact_uuid = ANY($1)
           UNION ALL
           SELECT fact_uuid, NULL, file, imported_at FROM fact_imports
           WHERE fact_uuid = ANY($1)""",
        [list(uuids)],
    )


def links_of_entity(store: Store, uuid: str) -> list[Row]:
    """The episodes that mention an entity (rows shaped as :func:`links_of_facts`')."""
    return store.fetch_dicts(
        "SELECT entity_uuid AS owner, episode_uuid, CAST(NULL AS VARCHAR) AS file, "
        "CAST(NULL AS TIMESTAMPTZ) AS imported_at FROM mentions WHERE entity_uuid = ?",
        [uuid],
    )


def episodes_named(store: Store, uuids: Sequence[str]) -> dict[str, Row]:
    """uuid -> (uuid, name, reference_time) of these episodes."""
    if not uuids:
        return {}
    rows = store.fetch_dicts(
        "SELECT uuid, name, reference_time FROM episodes WHERE uuid = ANY(?)", [list(uuids)]
    )
    return {r["uuid"]: r for r in rows}


def passages_in(store: Store, episode_uuids: Sequence[str]) -> list[Row]:
    """The passages (uuid, episode_uuid, position, text) of these episodes, in order."""
    if not episode_uuids:
        return []
    return store.fetch_dicts(
        "SELECT uuid, episode_uuid, position, text FROM passages "
        "WHERE episode_uuid = ANY(?) ORDER BY episode_uuid, position",
        [list(episode_uuids)],
    )
