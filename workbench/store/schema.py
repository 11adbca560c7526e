"""The DuckDB schema and its forward migrations.

``MIGRATIONS[i]`` brings a database from schema version ``i`` to ``i + 1``. A migration is a
function of the embedding dimension (vectors are stored as fixed-size ``FLOAT[dim]`` arrays)
returning SQL statements. Never edit a released migration: append a new one.

Lifecycle states: ACTIVE, DORMANT, ARCHIVED, EXPIRED, SOFT_DELETED, PERMANENT.
Queue states: queued, processing, done, failed.
Priorities: 0 = high, 1 = normal, 2 = low.
"""

from __future__ import annotations

from collections.abc import Callable

# Columns every memory (entity or fact) carries; kept in one place so both tables agree.
_MEMORY_COLUMNS = """
    importance INTEGER NOT NULL DEFAULT 3,
    stability INTEGER NOT NULL DEFAULT 3,
    classification_status VARCHAR,
    decay_score DOUBLE NOT NULL DEFAULT 0.0,
    lifecycle_state VARCHAR NOT NULL DEFAULT 'ACTIVE',
    last_accessed_at TIMESTAMPTZ,
    access_count BIGINT NOT NULL DEFAULT 0,
    soft_deleted_at TIMESTAMPTZ
"""


def _v1(dim: int) -> list[str]:
    return [
        """CREATE TABLE IF NOT EXISTS meta (
            key VARCHAR PRIMARY KEY,
            value VARCHAR NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS episodes (
            uuid VARCHAR PRIMARY KEY,
            group_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            body VARCHAR NOT NULL,
            source VARCHAR NOT NULL DEFAULT 'text',
            source_description VARCHAR NOT NULL DEFAULT '',
            reference_time TIMESTAMPTZ NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            priority INTEGER NOT NULL DEFAULT 1,
            status VARCHAR NOT NULL DEFAULT 'queued',
            status_detail VARCHAR,
            processed_at TIMESTAMPTZ,
            entity_count INTEGER NOT NULL DEFAULT 0,
            fact_count INTEGER NOT NULL DEFAULT 0
        )""",
        f"""CREATE TABLE IF NOT EXISTS entities (
            uuid VARCHAR PRIMARY KEY,
            group_id VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            name_norm VARCHAR NOT NULL,
            entity_type VARCHAR NOT NULL DEFAULT 'Entity',
            summary VARCHAR NOT NULL DEFAULT '',
            created_at TIMESTAMPTZ NOT NULL,
            updated_at TIMESTAMPTZ NOT NULL,
            {_MEMORY_COLUMNS}
        )""",
        "CREATE INDEX IF NOT EXISTS entities_group_name ON entities(group_id, name_norm)",
        f"""CREATE TABLE IF NOT EXISTS facts (
            uuid VARCHAR PRIMARY KEY,
            group_id VARCHAR NOT NULL,
            source_uuid VARCHAR NOT NULL,
            target_uuid VARCHAR NOT NULL,
            relation VARCHAR NOT NULL DEFAULT 'RELATES_TO',
            fact VARCHAR NOT NULL,
            episode_uuid VARCHAR,
            created_at TIMESTAMPTZ NOT NULL,
            valid_at TIMESTAMPTZ,
            invalid_at TIMESTAMPTZ,
            expired_at TIMESTAMPTZ,
            {_MEMORY_COLUMNS}
        )""",
        "CREATE INDEX IF NOT EXISTS facts_group ON facts(group_id)",
        """CREATE TABLE IF NOT EXISTS mentions (
            episode_uuid VARCHAR NOT NULL,
            entity_uuid VARCHAR NOT NULL,
            PRIMARY KEY (episode_uuid, entity_uuid)
        )""",
        f"""CREATE TABLE IF NOT EXISTS entity_embeddings (
            uuid VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            vector FLOAT[{dim}] NOT NULL
        )""",
        f"""CREATE TABLE IF NOT EXISTS fact_embeddings (
            uuid VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            vector FLOAT[{dim}] NOT NULL
        )""",
        """CREATE SEQUENCE IF NOT EXISTS llm_calls_seq""",
        """CREATE TABLE IF NOT EXISTS llm_calls (
            id BIGINT PRIMARY KEY DEFAULT nextval('llm_calls_seq'),
            ts TIMESTAMPTZ NOT NULL,
            prompt_name VARCHAR NOT NULL,
            model VARCHAR NOT NULL,
            episode_uuid VARCHAR,
            attempt INTEGER NOT NULL DEFAULT 1,
            status VARCHAR NOT NULL,
            error_type VARCHAR,
            error_message VARCHAR,
            prompt_tokens BIGINT NOT NULL DEFAULT 0,
            completion_tokens BIGINT NOT NULL DEFAULT 0,
            cached_tokens BIGINT NOT NULL DEFAULT 0,
            cache_write_tokens BIGINT NOT NULL DEFAULT 0,
            input_cost DOUBLE NOT NULL DEFAULT 0,
            output_cost DOUBLE NOT NULL DEFAULT 0,
            total_cost DOUBLE NOT NULL DEFAULT 0,
            cache_cost_saved DOUBLE NOT NULL DEFAULT 0,
            latency_seconds DOUBLE NOT NULL DEFAULT 0,
            finish_reason VARCHAR
        )""",
        """CREATE SEQUENCE IF NOT EXISTS queue_seq""",
        """CREATE TABLE IF NOT EXISTS queue (
            episode_uuid VARCHAR PRIMARY KEY,
            seq BIGINT NOT NULL DEFAULT nextval('queue_seq'),
            group_id VARCHAR NOT NULL,
            priority INTEGER NOT NULL DEFAULT 1,
            state VARCHAR NOT NULL DEFAULT 'queued',
            enqueued_at TIMESTAMPTZ NOT NULL,
            available_at TIMESTAMPTZ NOT NULL,
            leased_until TIMESTAMPTZ,
            lease_owner VARCHAR,
            attempts INTEGER NOT NULL DEFAULT 0,
            validation_failures INTEGER NOT NULL DEFAULT 0,
            error_type VARCHAR,
            error_message VARCHAR,
            started_at TIMESTAMPTZ,
            finished_at TIMESTAMPTZ
        )""",
        "CREATE INDEX IF NOT EXISTS queue_state ON queue(state, priority, enqueued_at)",
        """CREATE SEQUENCE IF NOT EXISTS maintenance_runs_seq""",
        """CREATE TABLE IF NOT EXISTS maintenance_runs (
            id BIGINT PRIMARY KEY DEFAULT nextval('maintenance_runs_seq'),
            started_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ,
            status VARCHAR NOT NULL,
            dry_run BOOLEAN NOT NULL DEFAULT FALSE,
            duration_seconds DOUBLE,
            scores_updated BIGINT NOT NULL DEFAULT 0,
            transitions BIGINT NOT NULL DEFAULT 0,
            purged BIGINT NOT NULL DEFAULT 0,
            error VARCHAR
        )""",
        """CREATE TABLE IF NOT EXISTS decay_history (
            run_id BIGINT NOT NULL,
            memory_kind VARCHAR NOT NULL,
            memory_uuid VARCHAR NOT NULL,
            from_state VARCHAR NOT NULL,
            to_state VARCHAR NOT NULL,
            old_decay DOUBLE,
            new_decay DOUBLE
        )""",
    ]


def _v2(dim: int) -> list[str]:
    """Drop the queue's (state, priority, enqueued_at) index. DuckDB never chose it (its
    queries on state scan, pruned by zone maps), yet it made every change of a message's state
    a delete and re-insert of the row: a claim's UPDATE cost 2.7 ms instead of 1.5."""
    return ["DROP INDEX IF EXISTS queue_state"]


def _v3(dim: int) -> list[str]:
    """Count how often a message was in flight when its process died (the crash-loop guard)."""
    return ["ALTER TABLE queue ADD COLUMN IF NOT EXISTS crashes INTEGER DEFAULT 0"]


def _v4(dim: int) -> list[str]:
    """Number every vector write (``seq``, from one sequence for both kinds): a saved vector
    index records the number it reflects, and a restart reads only the vectors written after
    it instead of every vector (see :mod:`workbench.index.vector.index`)."""
    return [
        f"CREATE SEQUENCE IF NOT EXISTS {VECTOR_SEQ}",
        *(
            f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS seq BIGINT "
            f"DEFAULT nextval('{VECTOR_SEQ}')"
            for table in ("entity_embeddings", "fact_embeddings")
        ),
    ]


def _v5(dim: int) -> list[str]:
    """Passages: what was said, kept verbatim. An episode is split into short passages when
    it is accepted (:mod:`workbench.ingest.passages`), each embedded and searchable at once,
    with no LLM. A passage lives as long as its episode (deleted with it); it carries the
    memory columns so that accesses are counted as for entities and facts, but decay
    maintenance leaves it alone."""
    return [
        f"""CREATE TABLE IF NOT EXISTS passages (
            uuid VARCHAR PRIMARY KEY,
            episode_uuid VARCHAR NOT NULL,
            group_id VARCHAR NOT NULL,
            position INTEGER NOT NULL,
            speaker VARCHAR,
            text VARCHAR NOT NULL,
            reference_time TIMESTAMPTZ NOT NULL,
            created_at TIMESTAMPTZ NOT NULL,
            {_MEMORY_COLUMNS}
        )""",
        "CREATE INDEX IF NOT EXISTS passages_episode ON passages(episode_uuid)",
        f"""CREATE TABLE IF NOT EXISTS passage_embeddings (
            uuid VARCHAR PRIMARY KEY,
            model VARCHAR NOT NULL,
            vector FLOAT[{dim}] NOT NULL,
            seq BIGINT DEFAULT nextval('{VECTOR_SEQ}')
        )""",
    ]


def _v7(dim: int) -> list[str]:
    """Re-extraction (``workbench reextract``): its runs, and the calls each made (``run_id``
    on ``llm_calls``; NULL for ingestion's own calls)."""
    return [
        """CREATE TABLE IF NOT EXISTS reextract_runs (
            run_id VARCHAR PRIMARY KEY,
            group_id VARCHAR NOT NULL,
            state VARCHAR NOT NULL,
            model VARCHAR,
            shadow_path VARCHAR NOT NULL,
            episodes INTEGER NOT NULL DEFAULT 0,
            predicted_calls INTEGER NOT NULL DEFAULT 0,
            calls_copied BIGINT NOT NULL DEFAULT 0,
            created_at TIMESTAMPTZ NOT NULL,
            finished_at TIMESTAMPTZ
        )""",
        "ALTER TABLE llm_calls ADD COLUMN IF NOT EXISTS run_id VARCHAR",
    ]


def _v8(dim: int) -> list[str]:
    """Search indexes saved in the database itself, for the processes sharing a database
    server (``store.saved_indexes``): each save of a kind is its files, cut in parts."""
    return [
        """CREATE TABLE IF NOT EXISTS saved_index_files (
            save_id VARCHAR NOT NULL,
            kind VARCHAR NOT NULL,
            name VARCHAR NOT NULL,
            part INTEGER NOT NULL,
            seq BIGINT,
            saved_at TIMESTAMPTZ NOT NULL,
            data BLOB NOT NULL,
            PRIMARY KEY (save_id, name, part)
        )""",
    ]


def _v9(dim: int) -> list[str]:
    """Provenance. ``fact_sources``: every episode that stated a fact, the first one (the
    fact's ``episode_uuid``) and each that stated it again later (extraction found it
    stored already), written with the episode, with the episode's reference time
    (``said_at``: a search ranks a fact's episodes without reading them); filled here from
    ``facts.episode_uuid`` for the facts stored before. ``fact_imports``: the file an
    imported fact came from and when (an imported fact has no episode)."""
    return [
        """CREATE TABLE IF NOT EXISTS fact_sources (
            fact_uuid VARCHAR NOT NULL,
            episode_uuid VARCHAR NOT NULL,
            said_at TIMESTAMPTZ NOT NULL,
            PRIMARY KEY (fact_uuid, episode_uuid)
        )""",
        # a search reads its facts' sources by fact (DuckDB: through this index only)
        "CREATE INDEX IF NOT EXISTS fact_sources_fact ON fact_sources(fact_uuid)",
        "CREATE INDEX IF NOT EXISTS fact_sources_episode ON fact_sources(episode_uuid)",
        """CREATE TABLE IF NOT EXISTS fact_imports (
            fact_uuid VARCHAR PRIMARY KEY,
            file VARCHAR NOT NULL,
            imported_at TIMESTAMPTZ NOT NULL
        )""",
        """INSERT INTO fact_sources (fact_uuid, episode_uuid, said_at)
           SELECT f.uuid, f.episode_uuid, coalesce(e.reference_time, f.created_at) FROM facts f
           LEFT JOIN episodes e ON e.uuid = f.episode_uuid
           WHERE f.episode_uuid IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM fact_sources s WHERE s.fact_uuid = f.uuid)""",
    ]


def embeddings_table(name: str, dim: int) -> str:
    """The statement creating an embeddings table as the migrations leave it (for a table
    that replaces one: ``workbench reembed``)."""
    return (
        f"CREATE TABLE {name} (uuid VARCHAR PRIMARY KEY, model VARCHAR NOT NULL, "
        f"vector FLOAT[{dim}] NOT NULL, seq BIGINT DEFAULT nextval('{VECTOR_SEQ}'))"
    )


def _v6(dim: int) -> list[str]:
    """Scoped API tokens (only a SHA-256 of each: a token is 32 random bytes, so a fast hash
    is enough) and the audit trail of the writes that remove or change memories. ``groups``
    and ``uuids`` are comma-separated (a group name never holds a comma)."""
    return [
        """CREATE TABLE IF NOT EXISTS api_tokens (
            name VARCHAR PRIMARY KEY,
            token_hash VARCHAR NOT NULL UNIQUE,
            groups VARCHAR NOT NULL DEFAULT '',
            read_only BOOLEAN NOT NULL DEFAULT FALSE,
            admin BOOLEAN NOT NULL DEFAULT FALSE,
            created_at TIMESTAMPTZ NOT NULL,
            last_used_at TIMESTAMPTZ
        )""",
        "CREATE SEQUENCE IF NOT EXISTS audit_log_seq",
        """CREATE TABLE IF NOT EXISTS audit_log (
            id BIGINT PRIMARY KEY DEFAULT nextval('audit_log_seq'),
            ts TIMESTAMPTZ NOT NULL,
            token_name VARCHAR NOT NULL,
            tool VARCHAR NOT NULL,
            groups VARCHAR NOT NULL DEFAULT '',
            uuids VARCHAR NOT NULL DEFAULT '',
            outcome VARCHAR NOT NULL
        )""",
    ]


VECTOR_SEQ = "vector_seq"
MIGRATIONS: list[Callable[[int], list[str]]] = [_v1, _v2, _v3, _v4, _v5, _v6, _v7, _v8, _v9]
SCHEMA_VERSION = len(MIGRATIONS)

LIFECYCLE_STATES = ("ACTIVE", "DORMANT", "ARCHIVED", "EXPIRED", "SOFT_DELETED", "PERMANENT")
PRIORITIES = {"high": 0, "normal": 1, "low": 2}
PRIORITY_NAMES = {v: k for k, v in PRIORITIES.items()}
