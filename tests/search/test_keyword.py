"""The incremental BM25 index: tokens, ranking, groups, updates, deletes, compaction."""

from __future__ import annotations

import math
import random

import pytest

from workbench.keyword import KeywordIndex, stem, tokenize


@pytest.mark.parametrize("word, root", [
    ("prefers", "prefer"), ("preferred", "prefer"), ("running", "run"), ("studies", "study"),
    ("glasses", "glass"), ("status", "status"), ("duckdb", "duckdb"), ("is", "is"),
])
def test_stem(word, root):
    assert stem(word) == root


def test_tokenize_drops_stop_words_and_possessives():
    assert tokenize("What is Lena's favourite Editor? It's Neovim!") == [
        "lena", "favourite", "editor", "neovim"]
    assert tokenize("the and of") == []


@pytest.fixture
def index():
    idx = KeywordIndex()
    idx.add(
        ["a", "b", "c", "d"],
        ["Sam prefers Rust for services", "Priya prefers Kotlin on Android",
         "Sam runs along the river", "Rust is a language; Rust Rust Rust"],
        ["g1", "g1", "g1", "g2"],
    )
    return idx


def test_rare_terms_rank_first_and_scores_are_normalised(index):
    hits = index.search("does Sam prefer Rust?", 4)
    assert hits[0][0] == "a"  # sam + prefer + rust
    assert {u for u, *_ in hits} == {"a", "b", "c", "d"}
    assert all(0.0 < norm <= 1.0 for _, _, norm in hits)
    assert [bm25 for _, bm25, _ in hits] == sorted((b for _, b, _ in hits), reverse=True)


def test_group_filter_and_allowed(index):
    assert [u for u, *_ in index.search("rust", 5, group_ids=["g2"])] == ["d"]
    assert index.search("rust", 5, group_ids=["unknown"]) == []
    assert [u for u, *_ in index.search("rust", 5, allowed={"a"})] == ["a"]
    assert index.groups() == {"g1", "g2"}


def test_unknown_words_lower_the_normalised_score(index):
    (_, _, full), = index.search("kotlin", 1)
    (_, _, partial), = index.search("kotlin zeppelin", 1)
    assert partial < full


def test_upsert_and_delete_follow_changes(index):
    index.add(["a"], ["Sam now prefers Zig"], ["g1"])
    assert "a" not in {u for u, *_ in index.search("rust", 5)}
    assert [u for u, *_ in index.search("zig", 5)] == ["a"]
    index.remove(["b", "missing"])
    assert index.search("kotlin", 5) == []
    assert len(index) == 3
    assert index.search("", 5) == [] and index.search("the of", 5) == []


def test_compaction_keeps_results():
    idx = KeywordIndex()
    n = 3000
    idx.add([f"u{i}" for i in range(n)], [f"memory number{i} about topic{i % 7}" for i in
                                           range(n)], ["g"] * n)
    before = idx.search("topic3 number10", 3)
    idx.remove([f"u{i}" for i in range(0, n, 2) if i != 10])  # forces a compaction
    assert idx._dead_postings == 0
    after = idx.search("topic3 number10", 3)
    assert after[0][0] == before[0][0] == "u10"
    assert all(int(u[1:]) % 2 == 1 or u == "u10" for u, *_ in idx.search("topic3", 50))


def test_common_terms_only_score_candidates_of_selective_terms():
    docs = [f"common filler {'rare' if i % 50 == 0 else 'x'}{i % 3}" for i in range(600)]
    fast = KeywordIndex(common_fraction=0.5, common_min_df=10)  # 'common', 'filler': skipped
    full = KeywordIndex(common_fraction=1.0, common_min_df=10**9)  # every term everywhere
    for idx in (fast, full):
        idx.add([f"u{i}" for i in range(600)], docs, ["g"] * 600)
    got = {u: round(b, 5) for u, b, _ in fast.search("common rare0 filler", 5)}
    want = {u: round(b, 5) for u, b, _ in full.search("common rare0 filler", 4)}
    assert got == want and set(got) == {"u0", "u150", "u300", "u450"}  # same exact scores
    assert len(fast.search("common filler", 700)) == 600  # only common words: all of them


def reference_bm25(docs: dict[str, str], query: str, k1: float = 1.2, b: float = 0.75):
    """Okapi BM25 written out plainly, over every document."""
    tokens = {u: tokenize(t) for u, t in docs.items()}
    avgdl = sum(len(t) for t in tokens.values()) / len(tokens)
    out = {}
    for uuid, toks in tokens.items():
        score = 0.0
        for term in dict.fromkeys(tokenize(query)):
            df = sum(term in t for t in tokens.values())
            tf = toks.count(term)
            if tf:
                idf = math.log(1 + (len(tokens) - df + 0.5) / (df + 0.5))
                score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(toks) / avgdl))
        if score:
            out[uuid] = score
    return out


@pytest.mark.parametrize("query", [
    "alpha", "alpha beta", "beta gamma delta", "omega3 alpha", "omega3", "omega3 omega7",
    "omega3 omega7 omega1",
])
def test_scores_equal_plain_bm25_on_sparse_and_dense_postings(query):
    """'alpha' / 'beta' / 'gamma' sit in most documents (the dense accumulation), 'omegaN'
    in a few (the sparse one); with no term treated as common every score is exact."""
    rng = random.Random(7)
    words = ["alpha"] * 6 + ["beta"] * 4 + ["gamma"] * 2 + ["delta"]
    docs = {f"u{i}": " ".join(rng.choices(words, k=rng.randint(1, 8)) + [f"omega{i % 40}"])
            for i in range(400)}
    index = KeywordIndex(common_fraction=1.0, common_min_df=10**9)
    index.add(list(docs), list(docs.values()), ["g"] * len(docs))
    index.remove(["u5", "u17"])  # dead postings are skipped
    del docs["u5"], docs["u17"]
    want = reference_bm25(docs, query)
    got = {u: bm25 for u, bm25, _ in index.search(query, len(docs))}
    assert set(got) == set(want)
    assert all(got[u] == pytest.approx(want[u], rel=1e-5) for u in want)
    top = sorted(want, key=lambda u: -want[u])[:10]
    assert [want[u] for u in top] == pytest.approx(
        [bm25 for _, bm25, _ in index.search(query, 10)], rel=1e-5)


@pytest.mark.parametrize("query", ["alpha", "beta gamma delta", "omega3 alpha", "omega3 zzz"])
def test_scores_of_given_documents_equal_their_search_scores(query):
    """``scores`` (the keyword score of candidates another index found) is the normalised
    score ``search`` gives the same documents, 0 for documents without a query word and for
    unknown uuids."""
    rng = random.Random(11)
    words = ["alpha"] * 6 + ["beta"] * 4 + ["gamma"] * 2 + ["delta", "epsilon"]
    docs = {f"u{i}": " ".join(rng.choices(words, k=rng.randint(1, 8)) + [f"omega{i % 40}"])
            for i in range(300)}
    index = KeywordIndex(common_fraction=1.0, common_min_df=10**9)
    index.add(list(docs), list(docs.values()), ["g"] * len(docs))
    index.remove(["u9"])
    found = {u: norm for u, _bm25, norm in index.search(query, len(docs))}
    asked = rng.sample(sorted(docs), 60) + sorted(found)[:5] + ["u9", "nope"]
    got = dict(zip(asked, index.scores(query, asked)))
    assert got["u9"] == got["nope"] == 0.0
    for uuid in asked:
        assert got[uuid] == pytest.approx(found.get(uuid, 0.0), rel=1e-5, abs=1e-7)
    assert any(v > 0 for v in got.values()) and any(v == 0 for v in got.values())
    assert index.scores("zzz unknown", ["u1"]) == [0.0]
