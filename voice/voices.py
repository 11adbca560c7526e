"""The voice catalogue: the 41 numbered voices, all 54 Kokoro voices and their languages.

A Kokoro voice name starts with a language letter and a gender letter (``af_heart``:
American English, female). The language of a request always follows its voice.
"""

from __future__ import annotations

from dataclasses import dataclass

from voice.errors import RequestInvalid

# Kokoro's language letter -> the language tag our phonemizers take.
LANGUAGES: dict[str, str] = {
    "a": "en-us",
    "b": "en-gb",
    "j": "ja",
    "z": "zh",
    "p": "pt-br",
    # Named directly only (not among the numbered ids); spoken through espeak-ng.
    "e": "es",
    "f": "fr-fr",
    "h": "hi",
    "i": "it",
}

# Voice ids "1".."41" in order (docs/voice.md). Index 0 is id "1".
NUMBERED_VOICES: tuple[str, ...] = (
    # 1-11 American female
    "af_heart", "af_bella", "af_nicole", "af_sky", "af_sarah", "af_jessica",
    "af_kore", "af_nova", "af_alloy", "af_aoede", "af_river",
    # 12-20 American male
    "am_michael", "am_adam", "am_eric", "am_liam", "am_fenrir", "am_echo",
    "am_onyx", "am_puck", "am_santa",
    # 21-28 British
    "bf_emma", "bf_isabella", "bf_alice", "bf_lily",
    "bm_george", "bm_lewis", "bm_daniel", "bm_fable",
    # 29-33 Japanese
    "jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo",
    # 34-38 Chinese
    "zf_xiaoxiao", "zf_xiaobei", "zf_xiaoni", "zf_xiaoyi", "zm_yunjian",
    # 39-41 Brazilian Portuguese
    "pf_dora", "pm_alex", "pm_santa",
)  # fmt: skip

# The 54 voices of Kokoro v1.0 that are not numbered (named directly only).
_UNNUMBERED: tuple[str, ...] = (
    "ef_dora", "em_alex", "em_santa", "ff_siwis",
    "hf_alpha", "hf_beta", "hm_omega", "hm_psi", "if_sara", "im_nicola",
    "zm_yunxi", "zm_yunxia", "zm_yunyang",
)  # fmt: skip

KOKORO_VOICES: frozenset[str] = frozenset(NUMBERED_VOICES + _UNNUMBERED)
VOICE_ID_RANGE = f"'1' to '{len(NUMBERED_VOICES)}'"
DEFAULT_VOICE_ID = "1"


@dataclass(frozen=True)
class Voice:
    """One voice: its Kokoro name, language tag and numeric id (None if it has none)."""

    name: str
    language: str
    id: str | None = None


def _language_of(name: str) -> str:
    return LANGUAGES[name[0]]


def _id_of(name: str) -> str | None:
    if name in NUMBERED_VOICES:
        return str(NUMBERED_VOICES.index(name) + 1)
    return None


def voice_by_name(name: str) -> Voice:
    """The voice called ``name`` (one of the 54 Kokoro voices)."""
    if name not in KOKORO_VOICES:
        raise RequestInvalid(
            f"unknown voice name {name!r}; use an id {VOICE_ID_RANGE} or a Kokoro name"
        )
    return Voice(name=name, language=_language_of(name), id=_id_of(name))


def resolve_voice(value: object) -> Voice:
    """Resolve a request's ``voice_id``: "1".."41" (string or int) or a Kokoro voice name."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise RequestInvalid(
            f"voice_id must be a string holding an integer from {VOICE_ID_RANGE} "
            f"(or a Kokoro voice name such as 'af_heart'), got {value!r}"
        )
    text = str(value).strip()
    if text.isdigit() and 1 <= int(text) <= len(NUMBERED_VOICES):
        return voice_by_name(NUMBERED_VOICES[int(text) - 1])
    if text in KOKORO_VOICES:
        return voice_by_name(text)
    raise RequestInvalid(
        f"invalid voice_id {value!r}: valid ids are {VOICE_ID_RANGE}, "
        "or a Kokoro voice name such as 'af_heart'"
    )


def numbered_voices() -> list[Voice]:
    """The 41 numbered voices in id order."""
    return [voice_by_name(name) for name in NUMBERED_VOICES]
