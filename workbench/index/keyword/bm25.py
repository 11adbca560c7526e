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

import hashlib
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from workbench.index.arrays import NPY_HEADERS, positions_in, top_positions
from workbench.index.keyword.documents import K1, B, KeywordDocuments
from workbench.index.keyword.tokens import STOP_WORDS, document_prints, stem, tokenize

__all__ = ["B", "K1", "STOP_WORDS", "KeywordIndex", "stem", "tokenize"]

# a number or an array of them (BM25 is computed both ways)
Numbers = TypeVar("Numbers", float, np.ndarray)
Allowed = Callable[[str], bool] | set[str] | frozenset[str] | None

SAVE_VERSION = 2  # 2: documents' fingerprints by text_prints (1: blake2b, one call each)


class KeywordIndex:
    """Incremental BM25 over documents keyed by uuid, with a group per document. It holds its
    documents and their postings (:attr:`docs`, a
    :class:`~workbench.index.keyword.documents.KeywordDocuments`); here their scoring, search,
    save and reopening."""

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
        self.docs = KeywordDocuments()

    # --- the documents ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.docs)

    def __contains__(self, uuid: object) -> bool:
        return uuid in self.docs

    def uuids(self) -> list[str]:
        return self.docs.uuids()

    def groups(self) -> set[str]:
        """The group ids that hold at least one live document."""
        return self.docs.groups()

    def add(self, uuids: Sequence[str], texts: Sequence[str], group_ids: Sequence[str]) -> None:
        """Insert or replace the documents."""
        self.docs.add(uuids, texts, group_ids)

    def remove(self, uuids: Sequence[str]) -> None:
        self.docs.remove(uuids)

    # --- saving and reopening -----------------------------------------------------------
    def save(self, path: str | Path) -> str:
        """Write the index to ``path`` (a ``.npz`` and its ``.json`` manifest), atomically; the
        save's checksum (what :meth:`read_saved` may be asked for)."""
        path = Path(path)
        with self.docs._lock:
            self.docs._compact()  # only live documents, slots 0..n-1, all frozen
            n = len(self.docs._uuids)
            arrays = {
                "lengths": np.diff(self.docs._doc_off),
                "term_ids": self.docs._doc_tids,
                "term_tfs": self.docs._doc_tfs,
                "doc_len": self.docs._doc_len[:n],
                "group": self.docs._group[:n],
                "print": self.docs._print[:n],
            }
            manifest = {
                "version": SAVE_VERSION,
                "k1": self.k1,
                "b": self.b,
                "terms": sorted(self.docs._terms, key=self.docs._terms.__getitem__),
                "uuids": list(self.docs._uuids),
                "groups": sorted(self.docs._group_codes, key=self.docs._group_codes.__getitem__),
            }
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            with open(tmp, "wb") as handle:
                np.savez(handle, **arrays)  # type: ignore[arg-type]  # numpy's stubs type **kwds as allow_pickle
        with open(tmp, "rb") as handle:  # read back in blocks, not held whole
            manifest["sha256"] = hashlib.file_digest(handle, "sha256").hexdigest()
        tmp_manifest = path.with_name(path.name + ".json.tmp")
        tmp_manifest.write_text(json.dumps(manifest))
        tmp.replace(path)
        tmp_manifest.replace(path.with_name(path.name + ".json"))
        return str(manifest["sha256"])

    @classmethod
    def open_saved(
        cls,
        path: str | Path,
        uuids: Sequence[str],
        texts: Sequence[str],
        group_ids: Sequence[str],
        **options: Any,
    ) -> tuple[KeywordIndex, int] | None:
        """The index saved at ``path`` caught up with these documents (what the store holds
        now), and how many it re-indexed; None when there is no usable save."""
        index = cls.read_saved(path, **options)
        if index is None:
            return None
        current = document_prints(texts, group_ids)
        with index.docs._lock:
            saved_uuids = index.docs._uuids
            held = [u for u in saved_uuids if u is not None]
            gone = [held[i] for i in np.flatnonzero(positions_in(held, uuids) < 0)]
            at = positions_in(uuids, saved_uuids)
            saved = index.docs._print[np.maximum(at, 0)]
            stale = np.flatnonzero((at < 0) | (saved != current)).tolist()
        index.remove(gone)
        index.add([uuids[i] for i in stale], [texts[i] for i in stale],
                  [group_ids[i] for i in stale])  # fmt: skip
        return index, len(gone) + len(stale)

    @staticmethod
    def verify_saved(path: str | Path) -> bool:
        """Whether a save at ``path`` is as written (its file's SHA-256 is its manifest's);
        True when there is none."""
        path = Path(path)
        manifest_path = path.with_name(path.name + ".json")
        if not manifest_path.exists() and not path.exists():
            return True
        try:
            manifest = json.loads(manifest_path.read_text())
            with path.open("rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
        except (OSError, ValueError):
            return False
        return isinstance(manifest, dict) and manifest.get("sha256") == digest

    @classmethod
    def read_saved(
        cls, path: str | Path, digest: str | None = None, **options: Any
    ) -> KeywordIndex | None:
        """The index saved at ``path`` as it was saved (not caught up with anything); None
        when there is no usable save, or, with ``digest``, when the save's checksum is not
        that one (a save known to hold the documents up to a point the caller catches up
        from)."""
        path = Path(path)
        try:
            manifest = json.loads(path.with_name(path.name + ".json").read_text())
            if manifest.get("version") != SAVE_VERSION:
                return None
            if digest is not None and manifest.get("sha256") != digest:
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
                with NPY_HEADERS, np.load(handle, allow_pickle=False) as data:
                    index._restore(manifest, {k: data[k] for k in data.files})
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return index

    def _restore(self, manifest: dict[str, Any], data: dict[str, np.ndarray]) -> None:
        """The state of a save: its arrays are the frozen part as they are."""
        self.docs._freeze(manifest["terms"], manifest["uuids"], manifest["groups"], data)

    # --- searching ----------------------------------------------------------------------
    def search(
        self,
        query: str,
        k: int,
        group_ids: Sequence[str] | None = None,
        allowed: Allowed = None,
    ) -> list[tuple[str, float, float]]:
        """The ``k`` best documents: ``[(uuid, bm25, keyword_score), ...]`` best first.

        ``keyword_score`` = bm25 / (sum of the idf of the query's words), clipped to 1: roughly
        the idf-weighted share of the query found in the document, comparable across queries
        (a document holding every query word once, at average length, scores 1). A query word
        no document holds counts with the largest idf (``count_unknown_terms``); measured on
        the retrieval set this beats ignoring such words.
        """
        with self.docs._lock:
            terms, missed = self._query_terms(query)
            if not terms or k <= 0:
                return []
            codes = None
            if group_ids is not None:
                codes = np.asarray(
                    [self.docs._group_codes[g] for g in group_ids if g in self.docs._group_codes],
                    dtype=np.int32,
                )
            slots, scores, idf_sum = self._score(terms, codes, None if allowed is not None else k)
            return self._top(slots, scores, k, allowed, idf_sum + missed)

    def _kept(self, slots: np.ndarray | int, codes: np.ndarray | None) -> np.ndarray:
        """Which of ``slots`` are live documents of the groups (``codes``; None = all). An
        int ``n`` stands for every slot below it (slices instead of gathers)."""
        dense = isinstance(slots, int)
        keep = self.docs._alive[:slots].copy() if dense else self.docs._alive[slots]
        if codes is not None:
            groups = self.docs._group[:slots] if dense else self.docs._group[slots]
            keep &= (groups == codes[0]) if codes.size == 1 else np.isin(groups, codes)
        return keep

    def scores(self, query: str, uuids: Sequence[str]) -> list[float]:
        """The keyword score (as :meth:`search` defines it) of each of these documents, 0.0
        for an unknown uuid. Reads only the documents' own terms, so it costs nothing like a
        search: it scores the candidates that another index (the vectors) found."""
        with self.docs._lock:
            terms, missed = self._query_terms(query)
            if not terms:
                return [0.0] * len(uuids)
            idf = {t: self._idf(self.docs._df[t]) for t in terms}
            idf_sum = sum(idf.values()) + missed
            out = []
            for uuid in uuids:
                slot = self.docs._slot.get(uuid)
                if slot is None:
                    out.append(0.0)
                    continue
                tids, tfs = self.docs._doc_terms(slot)
                norm = self._length_norm(float(self.docs._doc_len[slot]))
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
        terms = [self.docs._terms[t] for t in words if t in self.docs._terms]
        terms = [t for t in terms if self.docs._df[t] > 0]
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
        n_docs = max(len(self.docs._slot), 1)
        limit = max(self.common_min_df, self.common_fraction * n_docs)
        rare = [t for t in terms if self.docs._df[t] <= limit] or terms
        common = [t for t in terms if t not in rare]
        if sum(self.docs._df[t] for t in rare) > len(self.docs._uuids) // 16:
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
            reach = sum(self._idf(self.docs._df[t]) for t in common) * (self.k1 + 1.0)
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
        n_slots = len(self.docs._uuids)
        norm = self._length_norm(self.docs._doc_len[:n_slots])
        acc = np.zeros(n_slots, dtype=np.float32)
        idf_sum = 0.0
        for tid in terms:
            slots, tfs = self.docs._postings(tid)
            idf = self._idf(self.docs._df[tid])
            idf_sum += idf
            acc[slots] += self._bm25(idf, tfs, norm[slots])
        return acc, idf_sum

    def _term_scores(
        self, tid: int, slots: np.ndarray | None = None, tfs: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, float]:
        if slots is None or tfs is None:
            slots, tfs = self.docs._postings(tid)
        idf = self._idf(self.docs._df[tid])
        norm = self._length_norm(self.docs._doc_len[slots])
        return slots, self._bm25(idf, tfs, norm).astype(np.float32), idf

    def _length_norm(self, doc_len: Numbers) -> Numbers:
        """BM25's length normalisation ``k1 (1 - b + b len / avgdl)`` of documents of these
        lengths (a number or an array: two array passes)."""
        avgdl = max(self.docs._total_len / max(len(self.docs._slot), 1), 1e-9)
        return (self.k1 * (1.0 - self.b)) + (self.k1 * self.b / avgdl) * doc_len

    def _bm25(self, idf: float, tfs: Numbers, norm: Numbers) -> Numbers:
        """One term's BM25 contribution at these term frequencies and length norms."""
        score: Numbers = (idf * (self.k1 + 1.0)) * tfs / (tfs + norm)
        return score

    def _add_common(self, tid: int, slots: np.ndarray, scores: np.ndarray) -> float:
        """Add a common term's score to the candidates holding it (in place); its idf."""
        post_slots, post_tfs = self.docs._postings(tid)  # sorted by slot: slots only grow
        pos = np.minimum(np.searchsorted(post_slots, slots), post_slots.size - 1)
        hit = post_slots[pos] == slots
        _, extra, idf = self._term_scores(tid, slots[hit], post_tfs[pos[hit]])
        scores[hit] += extra
        return idf

    def _idf(self, df: int) -> float:
        n_docs = max(len(self.docs._slot), 1)
        return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))

    def _top(
        self,
        slots: np.ndarray,
        scores: np.ndarray,
        k: int,
        allowed: Allowed,
        idf_sum: float,
    ) -> list[tuple[str, float, float]]:
        if allowed is None:
            order = top_positions(scores, k)
        else:
            order = top_positions(scores, scores.size)
        out: list[tuple[str, float, float]] = []
        test = allowed.__contains__ if isinstance(allowed, set | frozenset) else allowed
        for pos in order:
            uuid = self.docs._uuids[int(slots[pos])]
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
