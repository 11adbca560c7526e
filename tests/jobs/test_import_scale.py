"""Imports that name many entities: set-based resolution, entity vectors from the import
(an ``entities.parquet`` beside the facts, no model), both backends."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from workbench.config import load_settings
from workbench.facade import Workbench
from workbench.jobs import importer
from workbench.names import name_key


class NoModel:
    """An embedder that must not be asked: the import brings every vector."""

    def __init__(self, dimensions: int, model: str):
        self.dimensions, self.model = dimensions, model
        self.asked: list[str] = []

    def embed(self, texts):
        self.asked.extend(texts)
        raise AssertionError(f"embedded {list(texts)[:3]}: the import brought every vector")

    def embed_queries(self, texts):
        return self.embed(texts)


def unit(seed: int, dim: int) -> np.ndarray:
    vector = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return vector / np.linalg.norm(vector)


def write(path, records, dim):
    table = pa.Table.from_pylist(records)
    vectors = np.vstack([unit(i + (1000 if "entities" in path.name else 0), dim)
                         for i in range(len(records))])  # fmt: skip
    column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), dim)
    pq.write_table(table.append_column("embedding", column), path)
    return vectors


def test_a_migration_with_entity_vectors_beside_the_facts_needs_no_model(tmp_path,
                                                                        hash_embedder):  # fmt: skip
    dim = hash_embedder.dimensions
    names = [(f"Person {i}", f"team-{i % 3}") for i in range(12)]
    entity_vectors = write(
        tmp_path / "entities.parquet",
        [{"name": n, "group_id": g, "entity_type": "Person"} for n, g in names],
        dim,
    )
    facts = [{"type": "fact", "source": names[i][0], "target": names[(i + 3) % 12][0],
              "fact": f"fact {i}", "group_id": names[i][1]} for i in range(12)]  # fmt: skip
    write(tmp_path / "facts.parquet", facts, dim)
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    no_model = NoModel(dim, hash_embedder.model)
    with Workbench.open(settings, embedder=no_model) as wb:
        report = wb.import_jsonl(tmp_path / "facts.parquet")
        assert no_model.asked == []
        assert report["entities_created"] == 12 and report["facts_created"] == 12
        assert report["error_count"] == 0
        stored = dict(
            wb.store.fetchall(
                "SELECT e.name, v.vector FROM entity_embeddings v JOIN entities e USING (uuid)"
            )
        )
        for (name, _), vector in zip(names, entity_vectors):
            assert np.allclose(np.asarray(stored[name]), vector, atol=1e-6)
        types = {r[0] for r in wb.store.fetchall("SELECT DISTINCT entity_type FROM entities")}
        assert types == {"Person"}  # the entity records were used, not bare names from facts


def test_a_bad_row_of_the_entities_file_names_that_file(tmp_path, hash_embedder):
    dim = hash_embedder.dimensions
    pq.write_table(
        pa.Table.from_pylist(
            [{"name": "Ada", "embedding": [0.5] * dim}, {"name": "Bob", "embedding": [1.0]}]
        ),
        tmp_path / "entities.parquet",
    )
    (tmp_path / "facts.jsonl").write_text(
        '{"type": "fact", "source": "Ada", "target": "Bob", "fact": "Ada knows Bob"}\n'
    )
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        report = wb.import_jsonl(tmp_path / "facts.jsonl")
        assert report["errors"] == [
            f"entities.parquet line 2: embedding has 1 dimensions; the database holds "
            f"{dim}-dimensional vectors"
        ]
        assert report["entities_created"] == 2 and report["facts_created"] == 1


def per_entity_oracle(stored_keys, facts_stored, chunks, default_group):
    """What the import did one entity at a time: per chunk, each (group, name) key the
    first time the chunk names it is existing when stored before, created otherwise; a fact
    is existing when its (group, source, target, text) was stored or seen before."""
    stored, seen_facts = set(stored_keys), set(facts_stored)
    counts = dict(entities_created=0, entities_existing=0, facts_created=0, facts_existing=0)
    for chunk in chunks:
        named: set = set()
        new: set = set()
        for line in chunk:
            group = line.get("group_id", default_group)
            names = [line["name"]] if line["type"] == "entity" else [line["source"],
                                                                      line["target"]]  # fmt: skip
            for name in names:
                key = (group, name_key(name))
                if key in named:
                    continue
                named.add(key)
                if key in stored:
                    counts["entities_existing"] += 1
                else:
                    counts["entities_created"] += 1
                    new.add(key)
            if line["type"] == "fact":
                fact = (group, name_key(line["source"]), name_key(line["target"]),
                        line["fact"].strip().lower())  # fmt: skip
                counts["facts_existing" if fact in seen_facts else "facts_created"] += 1
                seen_facts.add(fact)
        stored |= new
    return counts, stored, seen_facts


def graph_of(wb):
    entities = wb.store.fetchall("SELECT group_id, name_norm FROM entities")
    facts = wb.store.fetchall(
        """SELECT f.group_id, s.name_norm, t.name_norm, lower(trim(f.fact)) FROM facts f
           JOIN entities s ON s.uuid = f.source_uuid JOIN entities t ON t.uuid = f.target_uuid"""
    )
    return sorted(entities), sorted(facts)


@pytest.mark.parametrize("batch", [3, 7, 2048])
def test_set_based_resolution_equals_the_per_entity_one(batch, hash_embedder, monkeypatch):
    """Existing and new names, the same name in several groups and spellings, duplicates
    within and across chunks, entity lines after facts named them: the chunk's one statement
    finds what one look-up a name found, and the counts are the same."""
    monkeypatch.setattr(importer, "BATCH", batch)
    before = [
        {"type": "fact", "source": "Ada", "target": "Acme", "fact": "Ada works at Acme"},
        {"type": "fact", "source": "Bob", "target": "Acme", "fact": "Bob works at Acme",
         "group_id": "g2"},
    ]  # fmt: skip
    lines = [
        {"type": "fact", "source": "ada", "target": "Acme", "fact": " ada works at acme "},
        {"type": "fact", "source": "ADA", "target": "Zed", "fact": "Ada met Zed", "group_id": "g2"},
        {"type": "entity", "name": "Zed", "group_id": "g2", "entity_type": "Person"},
        {"type": "entity", "name": "Yan", "group_id": "g3"},
        {"type": "fact", "source": "Yan", "target": "Bob", "fact": "Yan knows Bob",
         "group_id": "g3"},
        {"type": "fact", "source": "Bob", "target": "Acme", "fact": "Bob works at Acme",
         "group_id": "g2"},
        {"type": "fact", "source": "Zed", "target": "Ada", "fact": "Zed met Ada", "group_id": "g2"},
        {"type": "fact", "source": "zed", "target": "ada", "fact": "Zed met Ada", "group_id": "g2"},
        {"type": "fact", "source": "Cy", "target": "Ada", "fact": "Cy knows Ada"},
        {"type": "entity", "name": "Cy"},
        {"type": "fact", "source": "Cy", "target": "Ada", "fact": "Cy knows Ada again"},
        {"type": "fact", "source": "Yan", "target": "Yan", "fact": "Yan talks to Yan",
         "group_id": "g3"},
    ]  # fmt: skip
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        wb.import_jsonl(before)
        stored_entities, stored_facts = graph_of(wb)
        report = wb.import_jsonl(lines)
        chunks = [lines[i : i + batch] for i in range(0, len(lines), batch)]
        counts, entities, facts = per_entity_oracle(stored_entities, stored_facts, chunks, "main")
        assert {k: report[k] for k in counts} == counts
        assert graph_of(wb) == (sorted(entities), sorted(facts))
        # one entity a key, whatever the chunks
        assert len(set(graph_of(wb)[0])) == len(graph_of(wb)[0])


@pytest.mark.parametrize("batch", [5, 2048])
def test_after_an_import_the_search_rows_equal_a_fresh_read_of_the_store(
    batch, tmp_path, hash_embedder, monkeypatch
):
    """The importer tells the search indexes the rows it wrote, not re-read: every column the
    row cache holds must be what the store holds (defaults of the columns it does not write,
    times as stored), and every keyword document and vector must be there."""
    from workbench.index.live import keyword_texts
    from workbench.index.rows import RowCache

    monkeypatch.setattr(importer, "BATCH", batch)
    dim = hash_embedder.dimensions
    write(tmp_path / "entities.parquet",
          [{"name": "Ada", "group_id": "team-1", "summary": "a mathematician",
            "importance": 5, "stability": 4, "created_at": "2021-05-01T10:00:00.123456+02:00"},
           {"name": "Bob", "group_id": "team-1", "entity_type": "Person"}], dim)  # fmt: skip
    lines = [
        {"type": "fact", "source": "Ada", "target": "Bob", "fact": "Ada taught Bob",
         "group_id": "team-1", "valid_at": "2020-01-01T00:00:00Z", "importance": 2,
         "stability": 5, "created_at": "2022-02-02T02:02:02.5Z"},
        {"type": "fact", "source": "Ada", "target": "Cy", "fact": "Ada met Cy",
         "relation": "knows", "invalid_at": "2024-03-01T12:00:00Z", "group_id": "team-1"},
        {"type": "entity", "name": "Dee", "summary": "new here", "importance": 1},
        {"type": "fact", "source": "Dee", "target": "Eve", "fact": "Dee writes to Eve"},
        {"type": "fact", "source": "Ada", "target": "Bob", "fact": "ada taught bob "},
    ] + [{"type": "fact", "source": f"P{i}", "target": f"P{i + 1}", "fact": f"note {i}",
          "group_id": f"g-{i % 3}"} for i in range(30)]  # fmt: skip
    write(tmp_path / "facts.parquet", lines, dim)
    settings = load_settings({"SVC_KNOWLEDGE_DB_PATH": ":memory:"}, env_file=None)
    with Workbench.open(settings, embedder=hash_embedder) as wb:
        indexes = wb.search.indexes

        def no_rebuild():  # a failed telling re-reads everything: it would hide a bad row
            raise AssertionError("the indexes were re-read")

        monkeypatch.setattr(indexes, "rebuild", no_rebuild)
        wb.import_jsonl(tmp_path / "facts.parquet")
        wb.import_jsonl(tmp_path / "facts.parquet")  # again: every line a duplicate
        for kind in ("entity", "fact"):
            fresh = RowCache(kind)
            fresh.load(wb.store)
            cached = indexes.rows[kind]
            assert sorted(cached.uuids()) == sorted(fresh.uuids()) and len(fresh) > 3
            for uuid in fresh.uuids():
                assert cached.get(uuid) == fresh.get(uuid), uuid
            words = indexes.keywords[kind]
            assert sorted(words.uuids()) == sorted(fresh.uuids())
            texts = dict(zip(fresh.uuids(), keyword_texts(kind, fresh)))
            for uuid, text in texts.items():
                assert words.scores(text, [uuid])[0] > 0 or not text.strip()
            assert sorted(indexes.vectors[kind].uuids()) == sorted(fresh.uuids())
