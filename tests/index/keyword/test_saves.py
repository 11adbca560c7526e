"""The keyword index saved beside the database and reopened: the same answers as an index built
from the documents the store holds now, whatever changed after the save; a damaged save is
ignored."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from workbench.index.keyword.bm25 import KeywordIndex

WORDS = "maria tom acme globex berlin munich python neovim atlas project lives works uses".split()


def _docs(n: int, seed: int = 1) -> dict[str, tuple[str, str]]:
    rng = random.Random(seed)
    return {
        f"d{i}": (" ".join(rng.choices(WORDS, k=rng.randint(2, 8))), rng.choice(["a", "b"]))
        for i in range(n)
    }


def _built(docs: dict[str, tuple[str, str]]) -> KeywordIndex:
    index = KeywordIndex()
    index.add(list(docs), [t for t, _ in docs.values()], [g for _, g in docs.values()])
    return index


def _answers(index: KeywordIndex) -> list:
    out = []
    for query in ("maria works", "python neovim atlas", "berlin", "globex uses tom"):
        for groups in (None, ["a"]):
            hits = index.search(query, 1000, group_ids=groups)
            out.append(sorted((u, round(s, 5), round(k, 5)) for u, s, k in hits))
    return out


def _open(path, docs):
    return KeywordIndex.open_saved(
        path, list(docs), [t for t, _ in docs.values()], [g for _, g in docs.values()]
    )


def test_a_reopened_index_answers_like_the_saved_one(tmp_path):
    docs = _docs(300)
    index = _built(docs)
    index.remove(["d1", "d2"])  # dead postings are compacted away by the save
    del docs["d1"], docs["d2"]
    index.save(tmp_path / "k.npz")
    reopened, redone = _open(tmp_path / "k.npz", docs)
    assert redone == 0
    assert len(reopened) == len(docs)
    assert _answers(reopened) == _answers(index) == _answers(_built(docs))


def test_changes_after_the_save_are_caught_up_neither_lost_nor_brought_back(tmp_path):
    docs = _docs(300)
    _built(docs).save(tmp_path / "k.npz")
    now = dict(docs)
    del now["d3"]  # deleted after the save
    now["d4"] = ("maria lives in berlin now", docs["d4"][1])  # text changed
    now["d5"] = (docs["d5"][0], "b" if docs["d5"][1] == "a" else "a")  # group changed
    now["new"] = ("tom works at globex", "a")  # written after the save
    reopened, redone = _open(tmp_path / "k.npz", now)
    assert redone == 4
    assert "d3" not in reopened and "new" in reopened
    assert _answers(reopened) == _answers(_built(now))
    # and it keeps following changes like a built one
    reopened.add(["later"], ["python atlas"], ["b"])
    fresh = _built(now)
    fresh.add(["later"], ["python atlas"], ["b"])
    assert _answers(reopened) == _answers(fresh)


@pytest.mark.parametrize("damage", ["truncate", "flip", "manifest", "missing"])
def test_a_damaged_save_is_ignored(tmp_path, damage):
    docs = _docs(50)
    path = tmp_path / "k.npz"
    _built(docs).save(path)
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "flip":
        raw = bytearray(path.read_bytes())
        raw[len(raw) // 2] ^= 0xFF
        path.write_bytes(bytes(raw))
    elif damage == "manifest":
        path.with_name("k.npz.json").write_text("{not json")
    else:
        path.unlink()
    assert _open(path, docs) is None


def test_an_empty_index_saves_and_reopens(tmp_path):
    KeywordIndex().save(tmp_path / "k.npz")
    reopened, redone = _open(tmp_path / "k.npz", {"x": ("maria works", "a")})
    assert redone == 1 and [u for u, *_ in reopened.search("maria", 5)] == ["x"]


def test_the_engine_reopens_its_saved_keywords_caught_up_with_the_store(tmp_path, monkeypatch):
    import numpy as np

    from tests.search.helpers import entity, fact, insert
    from workbench.fakes.embedder import HashEmbedder
    from workbench.index import saves as saves_module
    from workbench.metrics import Metrics
    from workbench.search.engine import SearchEngine
    from workbench.store import Store
    from workbench.store import graph as g

    monkeypatch.setattr(saves_module, "KEYWORDS_SAVED_FROM", 10)
    path = tmp_path / "kb.duckdb"
    store = Store.open(path, dim=8)
    maria, acme = entity("Maria"), entity("Acme")
    insert(store, "entity", [maria, acme], np.ones((2, 8), dtype=np.float32))
    facts = [fact(f"Maria note {i} about {WORDS[i % len(WORDS)]}", maria, acme) for i in range(30)]
    insert(store, "fact", facts, np.ones((30, 8), dtype=np.float32))

    def open_engine() -> SearchEngine:
        return SearchEngine(store, HashEmbedder(dimensions=8), Metrics(), access_background=False)

    first = open_engine()
    first.close()
    assert (tmp_path / "kb.duckdb.search" / "fact.keywords.npz").is_file()
    # written behind the saved index (another process, or a crash before the next save)
    with store.transaction():
        g.delete_facts(store, [facts[0]["uuid"]])
    late = fact("Maria adopted a greyhound", maria, acme)
    insert(store, "fact", [late], np.ones((1, 8), dtype=np.float32))

    opened = []
    real = KeywordIndex.open_saved.__func__

    def spy(cls, *args, **kwargs):
        result = real(cls, *args, **kwargs)
        opened.append((Path(args[0]).name, result is not None))
        return result

    monkeypatch.setattr(KeywordIndex, "open_saved", classmethod(spy))
    second = open_engine()
    try:
        # the facts reopened, not rebuilt; the 2 entities (and no passages) were too few
        # to be saved (the kinds load in threads: in any order)
        assert sorted(opened) == [
            ("entity.keywords.npz", False),
            ("fact.keywords.npz", True),
            ("passage.keywords.npz", False),
        ]
        found = [u for u, *_ in second.indexes.keywords["fact"].search("greyhound", 5)]
        assert found == [late["uuid"]]
        assert facts[0]["uuid"] not in second.indexes.keywords["fact"]
        assert len(second.indexes.keywords["fact"]) == 30
    finally:
        second.close()
        store.close()


def test_text_prints_are_stable_and_see_every_changed_byte():
    from workbench.index.arrays import text_prints

    rng = random.Random(4)
    texts = ["", "a", "Maria lives in Berlin", "Maria lives in Berlín", "中文 text", ""]
    texts += ["".join(rng.choices("abc xyz é中", k=rng.randint(0, 300))) for _ in range(300)]
    prints = text_prints(texts)
    for chunk in (1, 7, 1000):  # however the bytes are split into chunks
        assert text_prints(texts, chunk_bytes=chunk).tolist() == prints.tolist()
    assert [int(p) for p in prints] == [int(text_prints([t])[0]) for t in texts]
    assert len(set(prints.tolist())) == len(set(texts))
    for text in texts[6:60]:  # one byte changed, added or removed
        if text:
            i = rng.randrange(len(text))
            for other in (text[:i] + "q" + text[i + 1 :], text + "q", text[:-1]):
                if other != text:
                    assert text_prints([other])[0] != text_prints([text])[0]
