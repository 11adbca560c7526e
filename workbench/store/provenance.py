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
    "fact_source_rows",
    "entity_source_rows",
    "fact_links",
    "insert_links",
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
_EPISODE_RANKS = """
    SELECT s.fact_uuid AS owner, e.uuid AS episode_uuid, e.name AS episode_name,
           e.reference_time,
           row_number() OVER (PARTITION BY s.fact_uuid
                              ORDER BY e.reference_time, e.uuid) AS first_rank,
           row_number() OVER (PARTITION BY s.fact_uuid
                              ORDER BY e.reference_time DESC, e.uuid DESC) AS last_rank,
           count(*) OVER (PARTITION BY s.fact_uuid) AS episode_count
    FROM fact_sources s JOIN episodes e ON e.uuid = s.episode_uuid
    WHERE s.fact_uuid IN (SELECT unnest($1::VARCHAR[]))
"""


def fact_source_rows(store: Store, uuids: Sequence[str], latest: int | None) -> list[Row]:
    """One statement for the sources of these facts: a row per (fact, episode, passage) of
    the fact's first episode and its ``latest`` latest ones (None: every episode), each with
    the fact's ``episode_count`` and the episode's ``first_rank``/``last_rank``; and a row
    per imported fact (``file``, ``imported_at``; no episode). Ordered by fact, then time."""
    if not uuids:
        return []
    keep = "TRUE" if latest is None else "r.first_rank = 1 OR r.last_rank <= $2"
    params: list[Any] = [list(uuids)] if latest is None else [list(uuids), latest]
    return store.fetch_dicts(
        f"""WITH r AS ({_EPISODE_RANKS})
            SELECT r.owner, r.episode_uuid, r.episode_name, r.reference_time, r.first_rank,
                   r.last_rank, r.episode_count, p.uuid AS passage_uuid, p.position, p.text,
                   CAST(NULL AS VARCHAR) AS file, CAST(NULL AS TIMESTAMPTZ) AS imported_at
            FROM r LEFT JOIN passages p ON p.episode_uuid = r.episode_uuid
            WHERE {keep}
            UNION ALL
            SELECT i.fact_uuid, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL, NULL, i.file,
                   i.imported_at
            FROM fact_imports i WHERE i.fact_uuid IN (SELECT unnest($1::VARCHAR[]))
            ORDER BY 1, 4, 2, 9""",
        params,
    )


def entity_source_rows(store: Store, uuid: str) -> list[Row]:
    """The episodes that mention an entity, with their passages (the shape of
    :func:`fact_source_rows`), in time order."""
    return store.fetch_dicts(
        """SELECT m.entity_uuid AS owner, e.uuid AS episode_uuid, e.name AS episode_name,
                  e.reference_time, 0 AS first_rank, 0 AS last_rank, 0 AS episode_count,
                  p.uuid AS passage_uuid, p.position, p.text,
                  CAST(NULL AS VARCHAR) AS file, CAST(NULL AS TIMESTAMPTZ) AS imported_at
           FROM mentions m JOIN episodes e ON e.uuid = m.episode_uuid
           LEFT JOIN passages p ON p.episode_uuid = e.uuid
           WHERE m.entity_uuid = ?
           ORDER BY e.reference_time, e.uuid, p.position""",
        [uuid],
    )


def fact_links(store: Store, episode_uuids: Sequence[str]) -> list[Row]:
    """The ``fact_sources`` rows of these episodes (a re-extraction's shadow: its links)."""
    return store.fetch_dicts(
        "SELECT * FROM fact_sources WHERE episode_uuid IN (SELECT unnest(?::VARCHAR[]))",
        [list(episode_uuids)],
    )


def insert_links(store: Store, rows: Sequence[Row]) -> None:
    """``fact_sources`` rows (dicts of its columns) a promote carries into the live graph."""
    rows = list({(r["fact_uuid"], r["episode_uuid"]): r for r in rows}.values())
    if rows:
        store.executemany(
            "INSERT INTO fact_sources (fact_uuid, episode_uuid, created_at) VALUES (?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            [[r["fact_uuid"], r["episode_uuid"], r["created_at"]] for r in rows],
        )
