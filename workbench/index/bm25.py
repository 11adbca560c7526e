"""BM25 keyword index over memory texts (entity ``name + summary``, fact text), in memory.

Why our own and not ``bm25s`` / ``tantivy`` / duckdb ``fts``: memories arrive one episode at a
time and are deleted by maintenance, so the index must follow inserts and deletes
incrementally. duckdb ``fts`` and ``bm25s`` build a static index (a rebuild per insert, seconds
at a large store); ``tantivy`` follows updates but keeps a second on-disk copy next to DuckDB
with its own commit/reload cycle. An inverted index of numpy posting arrays is a few hundred
lines, has no dependency, and answers in about a millisecond at a large store (figures in
``docs/performance.md``); the store stays the single source of truth: at open the index is
read from its save beside the database and caught up with the store, or built from it.

Details: lower-cased word tokens, English stop words removed, a light suffix stemmer
(``prefers``/``preferred`` -> ``prefer``), Okapi BM25 (k1 = 1.2, b = 0.75). A deleted document
leaves dead postings that are skipped at query time and dropped by a compaction once they are
more than a third of all postings. Thread-safe (one lock).

Saved and reopened: :meth:`KeywordIndex.save` writes the documents' terms (not the postings,
rebuilt with numpy at open) with a fingerprint of each document's text and group and a
checksum; :meth:`KeywordIndex.open_saved` reads them back and catches up with the documents the
store holds now (re-adds those whose text or group changed or that are new, drops those gone),
so a save older than the last commit neither loses nor brings back a memory. A missing,
corrupt or foreign file is ignored (the index is built from the documents).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import sys
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from workbench.index.vector_math import positions_in, text_prints, top_positions

__all__ = ["STOP_WORDS", "KeywordIndex", "stem", "tokenize"]

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are aren't as at be because been
    before being below between both but by can can't cannot could couldn't did didn't do does
    doesn't doing don't down during each few for from further had hadn't has hasn't have
    haven't having he he'd he'll he's her here here's hers herself him himself his how how's i
    i'd i'll i'm i've if in into is isn't it it's its itself let's me more most mustn't my
    myself no nor not of off on once only or other ought our ours ourselves out over own same
    shan't she she'd she'll she's should shouldn't so some such than that that's the their
    theirs them themselves then there there's these they they'd they'll they're they've this
    those through to too under until up very was wasn't we we'd we'll we're we've were weren't
    what what's when when's where where's which while who who's whom why why's will with won't
    would wouldn't you you'd you'll you're you've your yours yourself yourselves
    also just any anything something tell know remember recall please use using used
    s t d ll m re ve""".split()
)

_TOKEN = re.compile(r"[^\W_]+(?:'[^\W_]+)?", re.UNICODE)
_VOWEL = re.compile(r"[aeiouy]")

K1 = 1.2
B = 0.75


def stem(word: str) -> str:
    """A light, deterministic English suffix stripper (same for documents and queries)."""
    if len(word) <= 3 or not word.isalpha():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            root = word[: -len(suffix)]
            if _VOWEL.search(root):
                if len(root) > 3 and root[-1] == root[-2] and root[-1] not in "lsz":
                    root = root[:-1]
                return root
    return word


@functools.lru_cache(maxsize=1 << 16)
def _term(raw: str) -> str | None:
    """The index term of one lower-cased word, or None for a stop word (memoised: words
    repeat, and entity summaries are re-tokenised every time they grow)."""
    token = raw[:-2] if raw.endswith("'s") else raw
    if token in STOP_WORDS or (len(token) == 1 and not token.isdigit()):
        return None
    return stem(token)


# Chinese, Japanese and Korean write words without spaces: a run of their characters is indexed
# as overlapping character pairs (the usual approach of search engines without a dictionary)
_CJK = re.compile(
    r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u31f0-\u31ff]+"
)


def tokenize(text: str) -> list[str]:
    """Stemmed content tokens of ``text`` (stop words and possessives removed); runs of
    Chinese, Japanese or Korean characters as character pairs."""
    words = _TOKEN.findall(text.lower())
    if _CJK.search(text):
        words = [part for word in words for part in _split_cjk(word)]
    terms = map(_term, words)
    return [t for t in terms if t is not None]


def _split_cjk(word: str) -> list[str]:
    if not _CJK.search(word):
        return [word]
    out, last = [], 0
    for run in _CJK.finditer(word):
        if run.start() > last:
            out.append(word[last : run.start()])
        chars = run.group()
        # a lone character stays a term (_term drops one-letter words otherwise)
        out += [chars[i : i + 2] for i in range(len(chars) - 1)] or [chars + chars]
        last = run.end()
    if last < len(word):
        out.append(word[last:])
    return out


SAVE_VERSION = 2  # 2: documents' fingerprints by text_prints (1: blake2b, one call each)


def document_prints(texts: Sequence[str], groups: Sequence[str]) -> np.ndarray:
    """A 64-bit fingerprint of each document's text and group (stable across processes;
    :func:`~workbench.index.vector_math.text_prints`, all at once)."""
    return text_prints([f"{g}\x00{t}" for t, g in zip(texts, groups)])


def document_print(text: str, group: str) -> int:
    return int(document_prints([text], [group])[0])


class KeywordIndex:
    """Incremental BM25 over documents keyed by uuid, with a group per document."""

    def __init__(
        self,
        k1: float = K1,
        b: float = B,
        count_unknown_terms: bool = True,
        common_fraction: float = 0.1,
        common_min_df: int = 5_000,
    ):
        self.k1 = k1
        self.b = b
        self.count_unknown_terms = count_unknown_terms
        self.common_fraction = common_fraction
        self.common_min_df = common_min_df
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self._terms: dict[str, int] = {}
        self._df: list[int] = []
        # postings, compact: a frozen part as CSR arrays (slots and tfs of term t at
        # _base_off[t]:_base_off[t + 1], slots ascending) and, for documents added since, a
        # Python list per term (merged into the frozen part by _compact)
        self._base_off = np.zeros(1, dtype=np.int64)
        self._base_slots = np.zeros(0, dtype=np.int32)
        self._base_tfs = np.zeros(0, dtype=np.float32)
        self._post_slots: dict[int, list[int]] = {}
        self._post_tfs: dict[int, list[int]] = {}
        self._post_np: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._new_postings = 0
        self._dead_postings = 0
        self._total_postings = 0
        # each document's terms, the same way: frozen documents (slots below _n_base) as CSR,
        # later ones in a dict
        self._n_base = 0
        self._doc_off = np.zeros(1, dtype=np.int64)
        self._doc_tids = np.zeros(0, dtype=np.int32)
        self._doc_tfs = np.zeros(0, dtype=np.int32)
        self._doc_new: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._uuids: list[str | None] = []
        self._doc_len = np.zeros(1024, dtype=np.float32)
        self._alive = np.zeros(1024, dtype=bool)
        self._group = np.full(1024, -1, dtype=np.int32)
        self._print = np.zeros(1024, dtype=np.uint64)  # fingerprint of each slot's document
        self._slot: dict[str, int] = {}
        self._group_codes: dict[str, int] = {}
        self._total_len = 0.0

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._slot

    def uuids(self) -> list[str]:
        with self._lock:
            return list(self._slot)

    def groups(self) -> set[str]:
        """The group ids that hold at least one live document."""
        with self._lock:
            codes = set(np.unique(self._group[: len(self._uuids)][self._alive[: len(self._uuids)]]))
            return {g for g, c in self._group_codes.items() if c in codes}

    # --- writing ------------------------------------------------------------------------
    def add(self, uuids: Sequence[str], texts: Sequence[str], group_ids: Sequence[str]) -> None:
        """Insert or replace the documents."""
        if not (len(uuids) == len(texts) == len(group_ids)):
            raise ValueError("add() needs one text and one group_id per uuid")
        prints = document_prints(texts, group_ids).tolist()
        with self._lock:
            for uuid, text, group, fp in zip(uuids, texts, group_ids, prints):
                if uuid in self._slot:
                    self._delete(uuid)
                self._insert(uuid, text, group, fp)
            self._maybe_compact()

    def remove(self, uuids: Sequence[str]) -> None:
        with self._lock:
            for uuid in uuids:
                if uuid in self._slot:
                    self._delete(uuid)
            self._maybe_compact()

    def _insert(self, uuid: str, text: str, group: str, fp: int) -> None:
        counts = Counter(tokenize(text))
        slot = len(self._uuids)
        self._ensure_capacity(slot + 1)
        term_ids = np.empty(len(counts), dtype=np.int32)
        term_tfs = np.fromiter(counts.values(), dtype=np.int32, count=len(counts))
        for i, (term, tf) in enumerate(counts.items()):
            tid = self._terms.get(term)
            if tid is None:
                tid = self._terms[term] = len(self._df)
                self._df.append(0)
            self._df[tid] += 1
            self._post_slots.setdefault(tid, []).append(slot)
            self._post_tfs.setdefault(tid, []).append(tf)
            self._post_np.pop(tid, None)
            term_ids[i] = tid
        length = float(sum(counts.values()))
        self._uuids.append(uuid)
        self._doc_new[slot] = (term_ids, term_tfs)
        self._doc_len[slot] = length
        self._alive[slot] = True
        self._group[slot] = self._group_codes.setdefault(group, len(self._group_codes))
        self._print[slot] = fp
        self._slot[uuid] = slot
        self._total_len += length
        self._total_postings += len(counts)
        self._new_postings += len(counts)

    def _doc_terms(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """A live document's (term ids, term frequencies)."""
        if slot < self._n_base:
            lo, hi = self._doc_off[slot], self._doc_off[slot + 1]
            return self._doc_tids[lo:hi], self._doc_tfs[lo:hi]
        return self._doc_new[slot]

    def _delete(self, uuid: str) -> None:
        slot = self._slot.pop(uuid)
        term_ids, _tfs = self._doc_terms(slot)
        for tid in term_ids.tolist():
            self._df[tid] -= 1
        self._dead_postings += len(term_ids)
        self._total_len -= float(self._doc_len[slot])
        self._alive[slot] = False
        self._uuids[slot] = None
        self._doc_new.pop(slot, None)

    def _ensure_capacity(self, needed: int) -> None:
        if needed <= self._alive.size:
            return
        cap = max(needed, self._alive.size * 2)
        self._doc_len = np.concatenate(
            [self._doc_len, np.zeros(cap - self._doc_len.size, dtype=np.float32)]
        )
        self._alive = np.concatenate([self._alive, np.zeros(cap - self._alive.size, dtype=bool)])
        self._group = np.concatenate(
            [self._group, np.full(cap - self._group.size, -1, dtype=np.int32)]
        )
        self._print = np.concatenate(
            [self._print, np.zeros(cap - self._print.size, dtype=np.uint64)]
        )

    def _maybe_compact(self) -> None:
        """Compact when dead postings are over a third of all, or when the postings added
        since the last compaction (held as Python lists, ~10x the size of the frozen arrays)
        outgrow the frozen ones."""
        if self._dead_postings > max(1000, self._total_postings // 3) or self._new_postings > max(
            50_000, self._total_postings - self._new_postings
        ):
            self._compact()

    def _compact(self) -> None:
        """Renumber the live documents 0..n-1, drop terms no document holds, and freeze every
        posting into the CSR arrays (numpy throughout: no Python object per posting)."""
        live = [s for s, u in enumerate(self._uuids) if u is not None]
        # the frozen documents' terms straight from the CSR arrays, then the later ones
        base_lengths = np.diff(self._doc_off)
        owner = np.repeat(np.arange(self._n_base), base_lengths)
        alive = self._alive[: self._n_base]
        later = [s for s in live if s >= self._n_base]
        parts = [self._doc_new[s] for s in later]
        lengths = np.concatenate([
            base_lengths[alive],
            np.fromiter((len(t) for t, _ in parts), dtype=np.int64, count=len(parts)),
        ]).astype(np.int64)  # fmt: skip
        tids = np.concatenate([self._doc_tids[alive[owner]], *(t for t, _ in parts)])
        tfs = np.concatenate([self._doc_tfs[alive[owner]], *(f for _, f in parts)])
        df = np.asarray(self._df, dtype=np.int64)
        kept_terms = np.flatnonzero(df > 0)
        renumber = np.full(max(len(df), 1), -1, dtype=np.int64)
        renumber[kept_terms] = np.arange(kept_terms.size)
        by_id = sorted(self._terms, key=self._terms.__getitem__)
        terms = [by_id[i] for i in kept_terms.tolist()]
        slots = np.asarray(live, dtype=np.int64)
        self._freeze(
            terms,
            [self._uuids[s] for s in live],
            sorted(self._group_codes, key=self._group_codes.__getitem__),
            {
                "lengths": lengths,
                "term_ids": renumber[tids].astype(np.int32) if tids.size else tids,
                "term_tfs": tfs.astype(np.int32),
                "doc_len": self._doc_len[slots],
                "group": self._group[slots],
                "print": self._print[slots],
            },
        )

    def _freeze(self, terms: list[str], uuids: list, groups: list[str], data: dict) -> None:
        """Set the whole state from documents 0..n-1 given as arrays (what :meth:`save`
        writes): ``lengths`` (terms per document), ``term_ids``/``term_tfs`` (concatenated),
        ``doc_len``, ``group`` (codes into ``groups``) and ``print``."""
        lengths, term_ids, term_tfs = data["lengths"], data["term_ids"], data["term_tfs"]
        n = len(uuids)
        if not (len(lengths) == n == len(data["doc_len"]) == len(data["print"])):
            raise ValueError("inconsistent save")
        if int(lengths.sum()) != term_ids.size or term_ids.size != term_tfs.size:
            raise ValueError("inconsistent save")
        if term_ids.size and (term_ids.max() >= len(terms) or term_ids.min() < 0):
            raise ValueError("inconsistent save")
        doc_len, group, prints = (np.array(data[k]) for k in ("doc_len", "group", "print"))
        self._reset()
        self._terms = {t: i for i, t in enumerate(terms)}
        self._group_codes = {g: i for i, g in enumerate(groups)}
        self._ensure_capacity(n)
        self._doc_len[:n] = doc_len
        self._group[:n] = group
        self._print[:n] = prints
        self._alive[:n] = True
        # interned: the row cache and the vector index hold the same string objects
        self._uuids = [u if u is None else sys.intern(u) for u in uuids]
        self._slot = dict(zip(self._uuids, range(n)))
        self._n_base = n
        self._doc_off = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self._doc_tids = np.ascontiguousarray(term_ids, dtype=np.int32)
        self._doc_tfs = np.ascontiguousarray(term_tfs, dtype=np.int32)
        # postings: every (term, slot, tf), grouped by term, slots ascending within a term
        slots = np.repeat(np.arange(n, dtype=np.int32), lengths)
        order = np.argsort(self._doc_tids, kind="stable")
        by_term = np.bincount(self._doc_tids, minlength=len(terms))
        self._df = by_term.tolist()
        self._base_off = np.concatenate([[0], np.cumsum(by_term)]).astype(np.int64)
        self._base_slots = slots[order]
        self._base_tfs = self._doc_tfs[order].astype(np.float32)
        self._total_len = float(doc_len.sum())
        self._total_postings = int(term_ids.size)

    # --- saving and reopening -----------------------------------------------------------
    def save(self, path: str | Path) -> None:
        """Write the index to ``path`` (a ``.npz`` and its ``.json`` manifest), atomically."""
        path = Path(path)
        with self._lock:
            self._compact()  # only live documents, slots 0..n-1, all frozen
            n = len(self._uuids)
            arrays = {
                "lengths": np.diff(self._doc_off),
                "term_ids": self._doc_tids,
                "term_tfs": self._doc_tfs,
                "doc_len": self._doc_len[:n],
                "group": self._group[:n],
                "print": self._print[:n],
            }
            manifest = {
                "version": SAVE_VERSION,
                "k1": self.k1,
                "b": self.b,
                "terms": sorted(self._terms, key=self._terms.__getitem__),
                "uuids": list(self._uuids),
                "groups": sorted(self._group_codes, key=self._group_codes.__getitem__),
            }
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as handle:
                np.savez(handle, **arrays)
        with open(tmp, "rb") as handle:  # read back in blocks, not held whole
            manifest["sha256"] = hashlib.file_digest(handle, "sha256").hexdigest()
        tmp_manifest = path.with_name(path.name + ".json.tmp")
        tmp_manifest.write_text(json.dumps(manifest))
        tmp.replace(path)
        tmp_manifest.replace(path.with_name(path.name + ".json"))

    @classmethod
    def open_saved(
        cls,
        path: str | Path,
        uuids: Sequence[str],
        texts: Sequence[str],
        group_ids: Sequence[str],
        **options,
    ) -> tuple[KeywordIndex, int] | None:
        """The index saved at ``path`` caught up with these documents (what the store holds
        now), and how many it re-indexed; None when there is no usable save."""
        path = Path(path)
        try:
            manifest = json.loads(path.with_name(path.name + ".json").read_text())
            if manifest.get("version") != SAVE_VERSION:
                return None
            index = cls(**options)
            if (index.k1, index.b) != (manifest["k1"], manifest["b"]):
                return None
            # one open file: the checksum is of what is loaded (hashed in blocks, not read
            # whole first: at 1M memories, 86 MB less at the start-up's peak)
            with open(path, "rb") as handle:
                if manifest.get("sha256") != hashlib.file_digest(handle, "sha256").hexdigest():
                    return None
                handle.seek(0)
                with np.load(handle, allow_pickle=False) as data:
                    index._restore(manifest, {k: data[k] for k in data.files})
        except (OSError, ValueError, KeyError, TypeError):
            return None
        current = document_prints(texts, group_ids)
        with index._lock:
            saved_uuids = index._uuids
            gone = [saved_uuids[i] for i in np.flatnonzero(positions_in(saved_uuids, uuids) < 0)
                    if saved_uuids[i] is not None]  # fmt: skip
            at = positions_in(uuids, saved_uuids)
            saved = index._print[np.maximum(at, 0)]
            stale = np.flatnonzero((at < 0) | (saved != current)).tolist()
        index.remove(gone)
        index.add([uuids[i] for i in stale], [texts[i] for i in stale],
                  [group_ids[i] for i in stale])  # fmt: skip
        return index, len(gone) + len(stale)

    def _restore(self, manifest: dict, data: dict[str, np.ndarray]) -> None:
        """The state of a save: its arrays are the frozen part as they are."""
        self._freeze(manifest["terms"], manifest["uuids"], manifest["groups"], data)

    # --- searching ----------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int,
        group_ids: Sequence[str] | None = None,
        allowed: Callable[[str], bool] | set[str] | None = None,
    ) -> list[tuple[str, float, float]]:
        """The ``k`` best documents: ``[(uuid, bm25, keyword_score), ...]`` best first.

        ``keyword_score`` = bm25 / (sum of the idf of the query's words), clipped to 1: roughly
        the idf-weighted share of the query found in the document, comparable across queries
        (a document holding every query word once, at average length, scores 1). A query word
        no document holds counts with the largest idf (``count_unknown_terms``); measured on
        the retrieval set this beats ignoring such words.
        """
        with self._lock:
            terms, missed = self._query_terms(query)
            if not terms or k <= 0:
                return []
            codes = None
            if group_ids is not None:
                codes = np.asarray(
                    [self._group_codes[g] for g in group_ids if g in self._group_codes],
                    dtype=np.int32,
                )
            slots, scores, idf_sum = self._score(terms, codes, None if allowed is not None else k)
            return self._top(slots, scores, k, allowed, idf_sum + missed)

    def _kept(self, slots: np.ndarray | int, codes: np.ndarray | None) -> np.ndarray:
        """Which of ``slots`` are live documents of the groups (``codes``; None = all). An
        int ``n`` stands for every slot below it (slices instead of gathers)."""
        dense = isinstance(slots, int)
        keep = self._alive[:slots].copy() if dense else self._alive[slots]
        if codes is not None:
            groups = self._group[:slots] if dense else self._group[slots]
            keep &= (groups == codes[0]) if codes.size == 1 else np.isin(groups, codes)
        return keep

    def scores(self, query: str, uuids: Sequence[str]) -> list[float]:
        """The keyword score (as :meth:`search` defines it) of each of these documents, 0.0
        for an unknown uuid. Reads only the documents' own terms, so it costs nothing like a
        search: it scores the candidates that another index (the vectors) found."""
        with self._lock:
            terms, missed = self._query_terms(query)
            if not terms:
                return [0.0] * len(uuids)
            idf = {t: self._idf(self._df[t]) for t in terms}
            idf_sum = sum(idf.values()) + missed
            out = []
            for uuid in uuids:
                slot = self._slot.get(uuid)
                if slot is None:
                    out.append(0.0)
                    continue
                tids, tfs = self._doc_terms(slot)
                norm = self._length_norm(float(self._doc_len[slot]))
                score = sum(
                    self._bm25(idf[t], tf, norm)
                    for t, tf in zip(tids.tolist(), tfs.tolist())
                    if t in idf
                )
                out.append(_normalised(score, idf_sum))
            return out

    def _query_terms(self, query: str) -> tuple[list[int], float]:
        """The query's known term ids (each once) and the idf its unknown words add to the
        normaliser (``count_unknown_terms``: a word no memory holds counts as missed)."""
        words = list(dict.fromkeys(tokenize(query)))
        terms = [self._terms[t] for t in words if t in self._terms]
        terms = [t for t in terms if self._df[t] > 0]
        missed = (len(words) - len(terms)) * self._idf(0) if self.count_unknown_terms else 0.0
        return terms, missed

    def _score(
        self, terms: list[int], codes: np.ndarray | None, k: int | None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        """Summed BM25 of the live documents of the groups (``codes``; None = all) that may
        be among the ``k`` best (None: of all that match): (slots, scores, idf sum).

        Candidates come from the query's selective terms, accumulated sparsely or, when their
        postings cover much of the corpus, into one dense array. A term in more than
        ``common_fraction`` of the documents (and more than ``common_min_df``) only adds its
        score to candidates (a binary search in its sorted postings), and only to those that
        can still reach the ``k`` best: a candidate below the k-th best selective score by
        more than the common terms can add at most (idf x (k1 + 1) each) is dropped first
        (exact, as in MaxScore). So near-stop-words never cost a pass over the corpus."""
        n_docs = max(len(self._slot), 1)
        limit = max(self.common_min_df, self.common_fraction * n_docs)
        rare = [t for t in terms if self._df[t] <= limit] or terms
        common = [t for t in terms if t not in rare]
        if sum(self._df[t] for t in rare) > len(self._uuids) // 16:
            scores, idf_sum = self._score_dense(rare)
            scores *= self._kept(scores.size, codes)
            slots = _likely_top(scores, k) if k and not common else np.flatnonzero(scores)
            scores = scores[slots]
        else:
            parts = [self._term_scores(tid) for tid in rare]
            idf_sum = sum(idf for _, _, idf in parts)
            slots = np.concatenate([p[0] for p in parts])
            scores = np.concatenate([p[1] for p in parts])
            if len(rare) > 1:  # sum the terms' contributions per document
                kept, inverse = np.unique(slots, return_inverse=True)
                slots, scores = kept, np.bincount(inverse, weights=scores).astype(np.float32)
            keep = self._kept(slots, codes)
            slots, scores = slots[keep], scores[keep]
        if common and k and scores.size > k:
            reach = sum(self._idf(self._df[t]) for t in common) * (self.k1 + 1.0)
            kth = float(np.partition(scores, scores.size - k)[scores.size - k])
            keep = scores >= np.float32(kth - reach - 1e-5 * abs(kth))  # float32 sums
            slots, scores = slots[keep], scores[keep]
        for tid in common:
            idf_sum += self._add_common(tid, slots, scores)
        return slots, scores, idf_sum

    def _score_dense(self, terms: list[int]) -> tuple[np.ndarray, float]:
        """:meth:`_score` of terms whose postings cover much of the corpus: accumulate into
        one float32 array over the slots (no concatenation, sort or float64 pass); returns it
        (0 where no term occurs) and the terms' idf sum."""
        n_slots = len(self._uuids)
        norm = self._length_norm(self._doc_len[:n_slots])
        acc = np.zeros(n_slots, dtype=np.float32)
        idf_sum = 0.0
        for tid in terms:
            slots, tfs = self._postings(tid)
            idf = self._idf(self._df[tid])
            idf_sum += idf
            acc[slots] += self._bm25(idf, tfs, norm[slots])
        return acc, idf_sum

    def _term_scores(
        self, tid: int, slots: np.ndarray | None = None, tfs: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        if slots is None:
            slots, tfs = self._postings(tid)
        idf = self._idf(self._df[tid])
        norm = self._length_norm(self._doc_len[slots])
        return slots, self._bm25(idf, tfs, norm).astype(np.float32), idf

    def _length_norm(self, doc_len):
        """BM25's length normalisation ``k1 (1 - b + b len / avgdl)`` of documents of these
        lengths (a number or an array: two array passes)."""
        avgdl = max(self._total_len / max(len(self._slot), 1), 1e-9)
        return (self.k1 * (1.0 - self.b)) + (self.k1 * self.b / avgdl) * doc_len

    def _bm25(self, idf: float, tfs, norm):
        """One term's BM25 contribution at these term frequencies and length norms."""
        return (idf * (self.k1 + 1.0)) * tfs / (tfs + norm)

    def _add_common(self, tid: int, slots: np.ndarray, scores: np.ndarray) -> float:
        """Add a common term's score to the candidates holding it (in place); its idf."""
        post_slots, post_tfs = self._postings(tid)  # sorted by slot: slots only grow
        pos = np.minimum(np.searchsorted(post_slots, slots), post_slots.size - 1)
        hit = post_slots[pos] == slots
        _, extra, idf = self._term_scores(tid, slots[hit], post_tfs[pos[hit]])
        scores[hit] += extra
        return idf

    def _idf(self, df: int) -> float:
        n_docs = max(len(self._slot), 1)
        return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))

    def _postings(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        """A term's (slots ascending, tfs): its frozen postings, then those added since."""
        lo = hi = 0
        if tid + 1 < self._base_off.size:
            lo, hi = int(self._base_off[tid]), int(self._base_off[tid + 1])
        added = self._post_slots.get(tid)
        if not added:
            return self._base_slots[lo:hi], self._base_tfs[lo:hi]
        cached = self._post_np.get(tid)
        if cached is None:
            cached = (
                np.concatenate([self._base_slots[lo:hi], np.asarray(added, dtype=np.int32)]),
                np.concatenate(
                    [self._base_tfs[lo:hi], np.asarray(self._post_tfs[tid], dtype=np.float32)]
                ),
            )
            self._post_np[tid] = cached
        return cached

    def _top(self, slots, scores, k, allowed, idf_sum) -> list[tuple[str, float, float]]:
        if allowed is None:
            order = top_positions(scores, k)
        else:
            order = top_positions(scores, scores.size)
        out: list[tuple[str, float, float]] = []
        test = allowed.__contains__ if isinstance(allowed, set | frozenset) else allowed
        for pos in order:
            uuid = self._uuids[int(slots[pos])]
            if uuid is None or (test is not None and not test(uuid)):
                continue
            score = float(scores[pos])
            out.append((uuid, score, _normalised(score, idf_sum)))
            if len(out) == k:
                break
        return out


def _normalised(score: float, idf_sum: float) -> float:
    """The keyword score: BM25 over the query's idf mass, clipped to 1 (see ``search``)."""
    return min(1.0, score / idf_sum) if idf_sum > 0 else 0.0


def _likely_top(scores: np.ndarray, k: int, sample: int = 4096) -> np.ndarray:
    """Positions of positive ``scores`` that include the ``k`` best, without listing every
    positive one (at 1M documents that list and its selection cost more than the scoring).
    A threshold from an evenly strided sample should keep about ``8 k``; when it keeps at
    least ``k`` they hold the ``k`` best exactly (each of those is at least the k-th best,
    which is at least the threshold), else every positive position is returned."""
    n = scores.size
    if n <= 4 * sample:
        return np.flatnonzero(scores)
    picked = scores[:: n // sample]
    j = min(picked.size, max(1, math.ceil(8 * k * picked.size / n)))
    threshold = float(np.partition(picked, picked.size - j)[picked.size - j])
    if threshold > 0:
        above = np.flatnonzero(scores >= threshold)
        if above.size >= k:
            return above
    return np.flatnonzero(scores)
