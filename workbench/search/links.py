"""Following a link between facts, for multi-hop questions ("where does Audrey's sister work?"):
the text rules, pure. (Not to be confused with syncing the indexes with other processes:
:mod:`workbench.index.sync`.)

When the query names an entity with a possessive, the best-ranked fact of that entity that
mentions the word after it ("Audrey's sister is called Sofia Tanaka") links to its other end;
that entity's facts join the candidates and its best ones rank right after the link
(:func:`workbench.search.ranking.after_link`). The searcher
(:meth:`workbench.search.searcher.Searcher.linked`) applies these rules to its indexes.
"""

from __future__ import annotations

import re

from workbench.index.keyword.bm25 import tokenize

__all__ = ["NAMED_POOL", "LINKED_FACTS", "possessive", "bridge_words", "names_in", "spaced"]

NAMED_POOL = 20  # entities the keyword index offers as possibly named by a query
LINKED_FACTS = 200  # newest facts of a linked entity considered

_NON_WORD = re.compile(r"[\W_]+", re.UNICODE)


def _apostrophes(text: str) -> str:
    """``text`` with the typographic apostrophe (U+2019) written as ``'``."""
    return text.replace("\u2019", "'")


def possessive(text: str) -> bool:
    """Whether the query could hold a possessive (without one, nothing could link)."""
    return "'" in _apostrophes(text)


def spaced(text: str) -> str:
    """Lower-cased words separated by single spaces, with a space at both ends."""
    return f" {_NON_WORD.sub(' ', text.casefold()).strip()} "


def names_in(query: str, name: str) -> bool:
    """Whether the whole ``name`` occurs in the (:func:`spaced`) query: as words, or anywhere
    for a name in a script written without spaces."""
    words = spaced(name)
    if words.strip() == "":
        return False
    return words in query or (not words.strip().isascii() and words.strip() in query)


def bridge_words(text: str, names: list[str]) -> set[str]:
    """The words that follow a named entity's possessive in the query ("sister" in "Audrey's
    sister", for the name "Audrey"): what a linking fact must mention."""
    lowered = _apostrophes(text.casefold())
    words: set[str] = set()
    for name in names:
        for match in re.finditer(re.escape(name.casefold()) + r"'s?\s+([^\W\d_]+)", lowered):
            words.update(tokenize(match.group(1)))
    return words
