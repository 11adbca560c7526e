"""The documents of a keyword index and their postings, kept incrementally (see
:class:`KeywordDocuments`); the index that holds them
(:class:`~workbench.index.keyword.bm25.KeywordIndex`) scores and searches them."""

from __future__ import annotations

import itertools
import sys
import threading
from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np

from workbench.index.keyword.tokens import document_prints, tokenize

__all__ = ["B", "K1", "KeywordDocuments"]

K1 = 1.2
B = 0.75


class KeywordDocuments:
    """Documents keyed by uuid, with a group each, and their postings: a frozen part as CSR
    arrays and, for documents added since, a list per term, merged by a compaction once dead
    or new postings pile up. Thread-safe (one lock)."""

    def __init__(self) -> None:
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
            if len(uuids) > 1 and len(set(uuids)) == len(uuids):
                # distinct documents: the same as one at a time, in one pass
                for uuid in uuids:
                    if uuid in self._slot:
                        self._delete(uuid)
                self._insert_many(uuids, texts, group_ids, prints)
            else:
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

    def _insert_many(
        self, uuids: Sequence[str], texts: Sequence[str], groups: Sequence[str], prints: list[int]
    ) -> None:
        """:meth:`_insert` of each of these new documents, in order (the same slots, term ids
        and postings), counted with numpy: the terms of every document at once, then the
        postings appended a term at a time (a bulk import's chunk: thousands of documents)."""
        tokens = [tokenize(text) for text in texts]
        n, first = len(tokens), len(self._uuids)
        lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=n)
        flat = list(itertools.chain.from_iterable(tokens))
        terms = self._terms
        new = [word for word in dict.fromkeys(flat) if word not in terms]
        terms.update(zip(new, range(len(self._df), len(self._df) + len(new))))
        self._df.extend([0] * len(new))
        width = max(len(self._df), 1)
        tids = np.fromiter(map(terms.__getitem__, flat), dtype=np.int64, count=len(flat))
        docs = np.repeat(np.arange(n, dtype=np.int64), lengths)
        # one (document, term) pair each with its count, in the order the words first occur
        # (a document's terms as Counter lists them: its scores sum in the same order)
        pairs, first_at, tfs = np.unique(docs * width + tids, return_index=True, return_counts=True)
        in_text = np.argsort(first_at, kind="stable")
        pairs, tfs = pairs[in_text], tfs[in_text]
        pair_doc, pair_tid = pairs // width, pairs % width
        bounds = np.cumsum(np.bincount(pair_doc, minlength=n))[:-1]
        doc_tids = np.split(pair_tid.astype(np.int32), bounds)
        doc_tfs = np.split(tfs.astype(np.int32), bounds)
        # postings by term, slots ascending within a term (as one at a time appends them)
        order = np.lexsort((pair_doc, pair_tid))
        by_term, slots = pair_tid[order], (pair_doc[order] + first).tolist()
        counts = tfs[order].tolist()
        starts = np.flatnonzero(np.r_[True, by_term[1:] != by_term[:-1]]).tolist()
        starts = starts if len(by_term) else []
        ends = [*starts[1:], len(by_term)]
        df, post_slots, post_tfs = self._df, self._post_slots, self._post_tfs
        for tid, lo, hi in zip(by_term[starts].tolist(), starts, ends):
            df[tid] += hi - lo
            post_slots.setdefault(tid, []).extend(slots[lo:hi])
            post_tfs.setdefault(tid, []).extend(counts[lo:hi])
            self._post_np.pop(tid, None)
        self._ensure_capacity(first + n)
        self._doc_len[first : first + n] = lengths
        self._alive[first : first + n] = True
        codes = self._group_codes
        self._group[first : first + n] = [codes.setdefault(g, len(codes)) for g in groups]
        self._print[first : first + n] = np.asarray(prints, dtype=np.uint64)
        self._uuids.extend(uuids)
        self._slot.update(zip(uuids, range(first, first + n)))
        self._doc_new.update(zip(range(first, first + n), zip(doc_tids, doc_tfs)))
        self._total_len += float(lengths.sum())
        self._total_postings += len(pairs)
        self._new_postings += len(pairs)

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

    def _freeze(
        self,
        terms: list[str],
        uuids: Sequence[str | None],
        groups: list[str],
        data: Mapping[str, np.ndarray],
    ) -> None:
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
        self._slot = {u: i for i, u in enumerate(self._uuids) if u is not None}
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
