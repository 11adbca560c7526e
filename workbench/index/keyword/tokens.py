"""The words of a text as the keyword index counts them: lower-cased word tokens, English stop
words removed, a light suffix stemmer (``prefers``/``preferred`` -> ``prefer``), scripts written
without spaces cut into overlapping pairs of characters; and the fingerprint of a document."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

import numpy as np

from workbench.index.arrays import text_prints

__all__ = ["STOP_WORDS", "document_print", "document_prints", "stem", "tokenize"]

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


def document_prints(texts: Sequence[str], groups: Sequence[str]) -> np.ndarray:
    """A 64-bit fingerprint of each document's text and group (stable across processes;
    :func:`~workbench.index.arrays.text_prints`, all at once)."""
    return text_prints([f"{g}\x00{t}" for t, g in zip(texts, groups)])


def document_print(text: str, group: str) -> int:
    return int(document_prints([text], [group])[0])
