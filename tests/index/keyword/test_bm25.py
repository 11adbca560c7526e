"""The incremental BM25 index: tokens, ranking, groups, updates, deletes, compaction."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from workbench.index.keyword.bm25 import KeywordIndex, stem, tokenize


@pytest.mark.parametrize(
    "word, root",
    [
        ("prefers", "prefer"),
        ("preferred", "prefer"),
        ("running", "run"),
        ("studies", "study"),
        ("glasses", "glass"),
        ("status", "status"),
        ("duckdb", "duckdb"),
        ("is", "is"),
    ],
)
def test_stem(word, root):
    assert stem(word) == root


def test_tokenize_drops_stop_words_and_possessives():
    assert tokenize("What is Lena's favourite Editor? It's Neovim!") == [
        "lena",
        "favourite",
        "editor",
        "neovim",
    ]
    assert tokenize("the and of") == []


@pytest.fixture
def index():
    idx = KeywordIndex()
    idx.add(
        ["a", "b", "c", "d"],
        [
            "Sam prefers Rust for services",
            "Priya prefers Kotlin on Android",
            "Sam runs along the river",
            "Rust is a language; Rust Rust Rust",
        ],
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
    ((_, _, full),) = index.search("kotlin", 1)
    ((_, _, partial),) = index.search("kotlin zeppelin", 1)
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
    idx.add(
        [f"u{i}" for i in range(n)],
        [f"memory number{i} about topic{i % 7}" for i in range(n)],
        ["g"] * n,
    )
    before = idx.search("topic3 number10", 3)
    idx.remove([f"u{i}" for i in range(0, n, 2) if i != 10])  # forces a compaction
    assert idx.docs._dead_postings == 0
    after = idx.search("topic3 number10", 3)
    assert after[0][0] == before[0][0] == "u10"
    assert all(int(u[1:]) % 2 == 1 or u == "u10" for u, *_ in idx.search("topic3", 50))


def test_a_search_sees_what_was_added_after_an_earlier_search():
    idx = KeywordIndex()
    idx.add(["a"], ["rust compiler"], ["g"])
    assert [u for u, *_ in idx.search("rust", 5)] == ["a"]  # caches the term's postings
    idx.add(["b"], ["rust book"], ["g"])
    assert {u for u, *_ in idx.search("rust", 5)} == {"a", "b"}
    assert idx.scores("book", ["b"])[0] > 0


def _same_as_fresh(idx: KeywordIndex, live: dict, rng: random.Random, words: list[str]) -> None:
    fresh = KeywordIndex()
    fresh.add(list(live), [t for t, _ in live.values()], [g for _, g in live.values()])
    assert len(idx) == len(fresh) == len(live)
    assert {t: idx.docs._df[i] for t, i in idx.docs._terms.items() if idx.docs._df[i]} == {
        t: fresh.docs._df[i] for t, i in fresh.docs._terms.items()
    }
    for _ in range(10):
        query = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 4)))
        groups = rng.choice([None, ["g0"], ["g1", "g2"]])
        got = [(u, round(s, 4)) for u, s, _ in idx.search(query, 10, group_ids=groups)]
        want = [(u, round(s, 4)) for u, s, _ in fresh.search(query, 10, group_ids=groups)]
        assert [s for _, s in got] == [s for _, s in want]
        if got:  # the same documents, but for ties at the cut
            cut = got[-1][1]
            assert {u for u, s in got if s > cut} == {u for u, s in want if s > cut}
        some = rng.sample(sorted(live), min(5, len(live)))
        assert idx.scores(query, some) == pytest.approx(fresh.scores(query, some), abs=1e-5)


def test_an_index_after_many_rewrites_and_compactions_equals_one_built_from_its_live_docs():
    rng = random.Random(7)
    idx, live = KeywordIndex(), {}
    compactions = []
    compact = idx.docs._compact
    idx.docs._compact = lambda: (compactions.append(1), compact())
    for step in range(3000):
        # the vocabulary drifts: old words die out, so compactions drop and renumber terms
        words = [f"w{i}" for i in range(step // 10, step // 10 + 120)] + ["maria", "acme"]
        uuid = f"u{rng.randrange(150)}"
        if rng.random() < 0.15:
            idx.remove([uuid])
            live.pop(uuid, None)
        else:  # a rewritten summary: new text under the same uuid
            text = " ".join(rng.choice(words) for _ in range(rng.randrange(1, 80)))
            group = f"g{rng.randrange(3)}"
            idx.add([uuid], [text], [group])
            live[uuid] = (text, group)
        if step % 150 == 149:  # searches between writes fill the postings cache
            _same_as_fresh(idx, live, rng, words)
    assert len(compactions) >= 3
    assert len(idx.docs._terms) < 200  # of the 420 words used, the dead ones were dropped


def test_a_bulk_load_is_frozen_into_arrays_and_later_writes_merge_with_it():
    """Many added postings are frozen into the compact arrays (no Python list per posting);
    documents added, replaced and removed after that mix both parts and search exactly as an
    index built from the live documents."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(300)] + ["maria", "acme"]
    live = {f"u{i}": (" ".join(rng.choices(words, k=12)), f"g{i % 3}") for i in range(6000)}
    idx = KeywordIndex()
    idx.add(list(live), [t for t, _ in live.values()], [g for _, g in live.values()])
    assert idx.docs._n_base > 0 and idx.docs._base_slots.size > 50_000  # frozen during the bulk add
    assert idx.docs._new_postings < idx.docs._total_postings
    for step in range(400):
        uuid = f"u{rng.randrange(6500)}"
        if rng.random() < 0.3:
            idx.remove([uuid])
            live.pop(uuid, None)
        else:
            text = " ".join(rng.choices(words, k=rng.randrange(1, 20)))
            idx.add([uuid], [text], [f"g{step % 3}"])
            live[uuid] = (text, f"g{step % 3}")
        if step % 100 == 99:
            _same_as_fresh(idx, live, rng, words)


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


@pytest.mark.parametrize(
    "query",
    [
        "alpha",
        "alpha beta",
        "beta gamma delta",
        "omega3 alpha",
        "omega3",
        "omega3 omega7",
        "omega3 omega7 omega1",
    ],
)
def test_scores_equal_plain_bm25_on_sparse_and_dense_postings(query):
    """'alpha' / 'beta' / 'gamma' sit in most documents (the dense accumulation), 'omegaN'
    in a few (the sparse one); with no term treated as common every score is exact."""
    rng = random.Random(7)
    words = ["alpha"] * 6 + ["beta"] * 4 + ["gamma"] * 2 + ["delta"]
    docs = {
        f"u{i}": " ".join(rng.choices(words, k=rng.randint(1, 8)) + [f"omega{i % 40}"])
        for i in range(400)
    }
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
        [bm25 for _, bm25, _ in index.search(query, 10)], rel=1e-5
    )


@pytest.mark.parametrize("query", ["alpha", "beta gamma delta", "omega3 alpha", "omega3 zzz"])
def test_scores_of_given_documents_equal_their_search_scores(query):
    """``scores`` (the keyword score of candidates another index found) is the normalised
    score ``search`` gives the same documents, 0 for documents without a query word and for
    unknown uuids."""
    rng = random.Random(11)
    words = ["alpha"] * 6 + ["beta"] * 4 + ["gamma"] * 2 + ["delta", "epsilon"]
    docs = {
        f"u{i}": " ".join(rng.choices(words, k=rng.randint(1, 8)) + [f"omega{i % 40}"])
        for i in range(300)
    }
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


@pytest.mark.parametrize("seed", range(6))
def test_likely_top_always_holds_the_k_best(seed):
    """The threshold taken from a sample must never drop one of the ``k`` best: on random
    scores with many zeros, ties and a few outliers, every score above the k-th best is
    among the returned positions and at least ``k`` positive ones come back."""
    from workbench.index.keyword.bm25 import _likely_top

    rng = np.random.default_rng(seed)
    n = int(rng.integers(20_000, 120_000))
    scores = rng.choice([0.0, 0.5, 1.0, 1.5], size=n).astype(np.float32)
    scores[rng.integers(0, n, 40)] = rng.random(40).astype(np.float32) * 10
    scores[rng.random(n) < rng.random()] = 0  # sometimes mostly zeros
    for k in (1, 10, 50, 300):
        got = _likely_top(scores, k)
        positive = np.flatnonzero(scores)
        want_k = min(k, positive.size)
        assert got.size >= want_k
        assert np.all(scores[got] > 0)
        if want_k:
            kth = np.sort(scores[positive])[::-1][want_k - 1]
            assert set(np.flatnonzero(scores > kth)) <= set(got.tolist())
            assert np.count_nonzero(scores[got] >= kth) >= want_k


def test_dense_queries_on_a_large_index_rank_exactly():
    """Queries of words most documents hold take the dense path and its sampled threshold
    (above 16,384 documents): their top 50 must equal a full ranking, with groups and deletes."""
    rng = random.Random(5)
    words = ["alpha"] * 6 + ["beta"] * 5 + ["gamma"] * 4 + [f"w{i}" for i in range(30)]
    n = 20_000
    docs = {f"u{i}": " ".join(rng.choices(words, k=rng.randint(2, 14))) for i in range(n)}
    groups = {u: rng.choice(["a", "b", "c"]) for u in docs}
    index = KeywordIndex(common_fraction=1.0, common_min_df=10**9)
    index.add(list(docs), list(docs.values()), [groups[u] for u in docs])
    gone = rng.sample(sorted(docs), 2000)
    index.remove(gone)
    live = sorted(set(docs) - set(gone))
    for query, group_ids in [
        ("alpha beta", None),
        ("alpha beta gamma", ["b"]),
        ("gamma w3", ["a", "c"]),
        ("beta", None),
    ]:
        pool = [u for u in live if group_ids is None or groups[u] in group_ids]
        full = sorted(zip(index.scores(query, pool), pool), key=lambda p: -p[0])
        got = index.search(query, 50, group_ids)
        assert len(got) == 50
        assert [norm for _, _, norm in got] == pytest.approx([s for s, _ in full[:50]], rel=1e-5)
        kth = full[49][0]
        assert {u for s, u in full if s > kth * (1 + 1e-5)} <= {u for u, *_ in got}
        assert all(groups[u] in (group_ids or "abc") and u not in gone for u, *_ in got)


def test_likely_top_falls_back_when_the_sample_overestimates():
    """High scores sitting exactly on the sampled positions make the threshold keep fewer
    than ``k``: then every positive position must come back."""
    from workbench.index.keyword.bm25 import _likely_top

    n, k = 40_960, 50
    scores = np.ones(n, dtype=np.float32)
    step = n // 4096
    scores[np.arange(0, n, step)[:45]] = 5.0  # 45 < k high scores, all sampled
    got = _likely_top(scores, k)
    assert got.size == n


@pytest.mark.parametrize(
    "query, group_ids",
    [
        ("alpha beta w3", None),
        ("alpha w7 w11", ["b"]),
        ("beta alpha w150", None),
        ("alpha beta w1 w2", ["a", "c"]),
    ],
)
def test_common_words_are_added_only_where_they_can_change_the_top_exactly(query, group_ids):
    """A common word's score is added only to candidates that can still reach the k best
    (MaxScore-style pruning); the top 20 must equal a full ranking of every candidate (a
    document holding one of the selective words) by its whole BM25."""
    rng = random.Random(9)
    rare = [f"w{i}" for i in range(200)]
    docs = {}
    for i in range(8_000):
        words = rng.choices(rare, k=rng.randint(1, 6))
        words += ["alpha"] * (rng.random() < 0.6) * rng.randint(1, 3)
        words += ["beta"] * (rng.random() < 0.3)
        docs[f"u{i}"] = " ".join(words)
    groups = {u: rng.choice("abc") for u in docs}
    index = KeywordIndex(common_min_df=1000)
    index.add(list(docs), list(docs.values()), [groups[u] for u in docs])
    assert {t for t in ("alpha", "beta")} == {
        t for t in ("alpha", "beta") if index.docs._df[index.docs._terms[t]] > index.common_min_df
    }
    selective = {w for w in tokenize(query) if w.startswith("w")}
    pool = [
        u
        for u in docs
        if selective & set(docs[u].split()) and (group_ids is None or groups[u] in group_ids)
    ]
    full = sorted(zip(index.scores(query, pool), pool), key=lambda p: -p[0])
    got = index.search(query, 20, group_ids)
    assert [norm for _, _, norm in got] == pytest.approx([s for s, _ in full[:20]], rel=1e-5)
    kth = full[19][0]
    assert {u for s, u in full if s > kth * (1 + 1e-5)} <= {u for u, *_ in got}


def test_chinese_and_japanese_are_indexed_as_character_pairs():
    from workbench.index.keyword.bm25 import KeywordIndex, tokenize

    assert tokenize("王芳对花生过敏。") == ["王芳", "芳对", "对花", "花生", "生过", "过敏"]
    assert tokenize("抹茶ラテ and Kyoto") == ["抹茶", "茶ラ", "ラテ", "kyoto"]
    assert tokenize("猫") == ["猫猫"]  # a lone character is still a term
    index = KeywordIndex()
    index.add(
        ["a", "b", "c"],
        [
            "王芳对花生过敏。",
            "李娜每天晚上都在练习古筝。",
            "佐藤さんは毎晩ピアノの練習をしています。",
        ],
        ["g", "g", "g"],
    )
    assert [u for u, *_ in index.search("有什么东西是王芳不能吃的？花生？", 3)][0] == "a"
    assert [u for u, *_ in index.search("佐藤さんが習っている楽器はピアノですか", 3)][0] == "c"


def test_adding_many_documents_at_once_equals_adding_them_one_at_a_time():
    """``add`` of distinct documents counts them in one pass (a bulk import's chunk): the
    index it leaves (slots, term ids, postings, lengths, groups, fingerprints) and what it
    finds are those of adding each document alone, replacements, empty texts and character
    pairs included, across compactions."""
    rng = random.Random(5)
    words = [f"w{i}" for i in range(400)] + ["maria", "acme", "the", "studies", "東京タワー"]
    one, many = KeywordIndex(), KeywordIndex()
    live: dict[str, tuple[str, str]] = {}
    for batch in range(12):
        uuids = rng.sample([f"u{i}" for i in range(5000)], rng.randrange(2, 3000))
        texts = [" ".join(rng.choices(words, k=rng.randrange(0, 15))) for _ in uuids]
        groups = [f"g{rng.randrange(4)}" for _ in uuids]
        for uuid, text, group in zip(uuids, texts, groups):
            one.add([uuid], [text], [group])
            live[uuid] = (text, group)
        many.add(uuids, texts, groups)
        if batch % 3 == 2:
            gone = rng.sample(sorted(live), 200)
            one.remove(gone)
            many.remove(gone)
            for uuid in gone:
                live.pop(uuid)
        one.docs._compact()  # compactions at different moments must not matter: both frozen
        many.docs._compact()
        assert one.docs._terms == many.docs._terms and one.docs._df == many.docs._df
        assert one.docs._uuids == many.docs._uuids
        n = len(one.docs._uuids)
        for name in ("_doc_len", "_group", "_print", "_alive"):
            assert np.array_equal(getattr(one.docs, name)[:n], getattr(many.docs, name)[:n]), name
        for name in ("_doc_off", "_doc_tids", "_doc_tfs", "_base_off", "_base_slots"):
            assert np.array_equal(getattr(one.docs, name), getattr(many.docs, name)), name
        for query in ("maria acme", "w1 w2 w3", "studies", "東京", "w399"):
            assert one.search(query, 10) == many.search(query, 10)
    _same_as_fresh(many, live, rng, words)


def test_many_documents_added_at_once_before_a_compaction_search_as_one_at_a_time():
    """Documents added in one pass and not yet frozen (Python postings) search as those added
    one at a time."""
    rng = random.Random(9)
    words = [f"w{i}" for i in range(50)]
    one, many = KeywordIndex(), KeywordIndex()
    uuids = [f"u{i}" for i in range(300)]
    texts = [" ".join(rng.choices(words, k=rng.randrange(1, 10))) for _ in uuids]
    groups = [f"g{i % 2}" for i in range(300)]
    for uuid, text, group in zip(uuids, texts, groups):
        one.add([uuid], [text], [group])
    many.add(uuids, texts, groups)
    assert many.docs._n_base == 0 and many.docs._post_slots == one.docs._post_slots
    assert many.docs._post_tfs == one.docs._post_tfs
    for query in ("w1", "w2 w7", "w49 w3 w0"):
        assert one.search(query, 20) == many.search(query, 20)
        assert one.search(query, 20, group_ids=["g1"]) == many.search(query, 20, group_ids=["g1"])
