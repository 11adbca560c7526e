import json

from workbench.config import load_settings
from workbench.facade import Workbench


def test_import_creates_endpoints_dedupes_and_reports_bad_lines(tmp_path, hash_embedder):
    lines = [
        {
            "type": "entity",
            "name": "Maria Keller",
            "entity_type": "Person",
            "summary": "Data engineer",
            "importance": 5,
            "stability": 5,
        },
        {
            "type": "fact",
            "source": "maria keller",
            "target": "Acme",
            "relation": "WORKS_AT",
            "fact": "Maria Keller works at Acme",
            "valid_at": "2024-01-01T00:00:00Z",
        },
        {
            "type": "fact",
            "source": "Maria Keller",
            "target": "Acme",
            "relation": "WORKS_AT",
            "fact": "Maria Keller works at Acme",
        },
        {
            "type": "fact",
            "source": "Tom",
            "target": "Acme",
            "fact": "Tom works at Acme",
            "group_id": "other",
            "created_at": "2023-01-01T00:00:00Z",
        },
        {"type": "widget", "name": "x"},
        {"type": "fact", "source": "A"},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\nnot json\n\n")
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        report = wb.import_jsonl(path)
        assert report["entities_created"] == 4  # Maria, Acme (main), Tom, Acme (other)
        assert report["facts_created"] == 2 and report["facts_existing"] == 1
        assert report["error_count"] == 3
        assert report["errors"][0].startswith("line 5:")
        assert "line 7" in report["errors"][2]
        maria = wb.store.fetch_dicts("SELECT * FROM entities WHERE name = 'Maria Keller'")[0]
        assert (maria["importance"], maria["stability"]) == (5, 5)
        assert maria["classification_status"] == "provided"
        tom_fact = wb.store.fetch_dicts("SELECT * FROM facts WHERE group_id = 'other'")[0]
        assert tom_fact["created_at"].year == 2023
        assert tom_fact["classification_status"] is None  # left for the classifier
        assert wb.store.fetchone("SELECT count(*) FROM fact_embeddings")[0] == 2
        hits = wb.search_memory_facts("where does Maria work", group_ids=["main"])["facts"]
        assert hits and hits[0]["fact"] == "Maria Keller works at Acme"
        # importing the same file again creates nothing new
        again = wb.import_jsonl(path)
        assert again["entities_created"] == 0 and again["facts_created"] == 0


def test_add_memories_queues_every_episode(hash_embedder):
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        out = wb.add_memories([{"name": f"e{i}", "episode_body": f"note {i}"} for i in range(3)])
        assert [o["status"] for o in out] == ["queued"] * 3
        assert wb.get_queue_status()["counts"]["queued"] == 3


def test_an_index_update_failing_after_an_import_commit_leaves_the_caches_current(
    tmp_path, hash_embedder
):
    """The chunk is committed before the search indexes hear of it: when telling them fails,
    extraction (which reads the graph from the row caches) must still see the imported
    entities, or the next episode creates them a second time."""
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps(
            {
                "type": "fact",
                "source": "Maria Keller",
                "target": "Acme",
                "fact": "Maria Keller works at Acme",
            }
        )
        + "\n"
    )
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:

        def broken_upsert(*args, **kwargs):
            raise RuntimeError("index update failed")

        wb.search.indexes.on_upsert = broken_upsert
        report = wb.import_jsonl(path)
        assert report["entities_created"] == 2 and report["facts_created"] == 1
        assert wb.pipeline.extractor.reads.entities_by_norm(
            "main", ["maria keller", "acme"]
        ).keys() == {"maria keller", "acme"}
        hits = wb.search_memory_facts("where does Maria work", group_ids=["main"])["facts"]
        assert [h["fact"] for h in hits] == ["Maria Keller works at Acme"]


def test_a_chunk_resolves_its_stored_entities_in_one_statement(tmp_path, hash_embedder,
                                                               monkeypatch):  # fmt: skip
    """Names already stored are found (and reused) with one statement per chunk, whatever
    its groups, not one per name or per group: that was a large import's growing cost."""
    from workbench.store import bulk

    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        first = [{"type": "fact", "source": f"person {i}", "target": f"thing {i}",
                  "fact": f"person {i} likes thing {i}"} for i in range(40)]  # fmt: skip
        wb.import_jsonl(first)
        calls = []
        real = bulk.entity_uuids
        monkeypatch.setattr(bulk, "entity_uuids",
                            lambda *a, **k: calls.append(a[1]) or real(*a, **k))  # fmt: skip
        again = [{"type": "fact", "source": f"Person {i}", "target": f"thing {i + 1}",
                  "fact": f"person {i} also likes thing {i + 1}",
                  "group_id": "main" if i % 2 else "second"} for i in range(40)]  # fmt: skip
        report = wb.import_jsonl(again)
        assert len(calls) == 1 and {group for group, _ in calls[0]} == {"main", "second"}
        # in "main" the odd people and things were stored: reused, not made again
        assert report["entities_existing"] > 0
        assert report["facts_created"] == 40
        names = wb.store.fetchall(
            "SELECT name_norm, count(*) FROM entities WHERE group_id = 'main' GROUP BY 1 "
            "HAVING count(*) > 1"
        )
        assert names == []


TABLES = {"entity": "entities", "fact": "facts"}


def test_parquet_with_vectors_is_imported_without_embedding_them_again(tmp_path, hash_embedder):
    """Rows of a Parquet file are records like JSON lines; an ``embedding`` of the database's
    size is kept (normalised), one of another size is a reported, skipped row."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    dim = hash_embedder.dimensions
    mine = np.zeros(dim, np.float32)
    mine[:2] = [3.0, 4.0]  # not a unit vector: stored as (0.6, 0.8, 0, ...)
    rows = [
        {"type": "entity", "name": "Maria", "entity_type": "Person", "summary": "engineer",
         "embedding": mine.tolist()},
        {"type": "fact", "source": "Maria", "target": "Acme", "fact": "Maria works at Acme",
         "embedding": mine.tolist()},
        {"type": "fact", "source": "Tom", "target": "Acme", "fact": "Tom works at Acme",
         "embedding": None},
        {"type": "fact", "source": "Tom", "target": "Neovim", "fact": "Tom uses Neovim",
         "embedding": [1.0, 2.0, 3.0]},
    ]  # fmt: skip
    columns = {key: None for row in rows for key in row}  # one schema: nulls where absent
    path = tmp_path / "memories.data"  # recognised by its content, not its name
    pq.write_table(pa.Table.from_pylist([{**columns, **row} for row in rows]), path)
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        texts: list[str] = []
        real = hash_embedder.embed
        hash_embedder.embed = lambda batch: texts.extend(batch) or real(batch)
        report = wb.import_jsonl(path)
        hash_embedder.embed = real
        assert report["facts_created"] == 2 and report["error_count"] == 1
        assert report["errors"] == [
            f"line 4: embedding has 3 dimensions; the database holds {dim}-dimensional vectors"
        ]
        vector = lambda table, where: np.array(wb.store.fetchone(  # noqa: E731
            f"SELECT v.vector FROM {table}_embeddings v JOIN {TABLES[table]} t USING (uuid) "
            f"WHERE {where}")[0])  # fmt: skip
        assert np.allclose(vector("fact", "t.fact = 'Maria works at Acme'")[:3], [0.6, 0.8, 0])
        assert np.allclose(vector("entity", "t.name = 'Maria'")[:3], [0.6, 0.8, 0])
        embedded = vector("fact", "t.fact = 'Tom works at Acme'")
        assert np.allclose(embedded, hash_embedder.embed(["Tom works at Acme"])[0], atol=1e-6)
        # only the records without a vector were embedded
        assert "Maria works at Acme" not in texts and "Tom works at Acme" in texts
        assert not any(t.startswith("Maria (") for t in texts)
        hits = wb.search_memory_facts("Tom works at Acme")["facts"]
        assert hits[0]["fact"] == "Tom works at Acme"


def test_a_broken_parquet_file_or_a_binary_file_is_a_clear_error(tmp_path, hash_embedder):
    import pytest

    from workbench.errors import InvalidInput

    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"PAR1" + b"\x00" * 64)
    binary = tmp_path / "image.jsonl"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        with pytest.raises(InvalidInput, match="not a readable Parquet file"):
            wb.import_jsonl(broken)
        with pytest.raises(InvalidInput, match="not a JSON-lines text file: line 1"):
            wb.import_jsonl(binary)


def test_a_nul_character_is_refused_on_every_backend(tmp_path, hash_embedder):
    """PostgreSQL cannot store a NUL: an import line or an episode holding one is refused
    with a clear error (the same on DuckDB); the good lines are imported as always."""
    import pytest

    from workbench.errors import InvalidInput

    source = tmp_path / "nul.jsonl"
    lines = [
        {"type": "fact", "source": "Ann", "target": "Bo", "fact": "Ann met Bo"},
        {"type": "fact", "source": "Ann\u0000", "target": "Bo", "fact": "Ann saw Bo"},
        {"type": "entity", "name": "Cy", "summary": "likes\u0000tea"},
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        report = wb.import_jsonl(source)
        assert report["facts_created"] == 1 and report["entities_created"] == 2
        assert [e.split(":")[:2] for e in report["errors"]] == [
            ["line 2", " source"],
            ["line 3", " summary"],
        ]
        assert all("NUL character" in e for e in report["errors"])
        for arguments in ({"name": "n\x00"}, {"episode_body": "hi\x00"},
                          {"source_description": "chat\x00"}):  # fmt: skip
            call = {"name": "n", "episode_body": "hi", "group_id": "g", **arguments}
            argument = next(iter(arguments))
            with pytest.raises(InvalidInput, match=f"'{argument}' contains a NUL character"):
                wb.add_memory(**call)
        assert wb.add_memory(name="n", episode_body="hi", group_id="g")["status"]
