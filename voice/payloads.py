"""Validating request bodies into values (pure: bytes in, value or RequestInvalid out).

``POST /notify`` takes the cloud notification payload shape::

    {"message": "Build finished", "voice_id": "1", "voice_settings": {"speed": 1.2},
     "title": "CI", "volume": 0.8, "priority": "high"}

Unknown fields (and unknown ``voice_settings`` such as ``stability``) are ignored, so a client
written for a cloud text-to-speech service works unchanged.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from voice.engine import MAX_SPEED, MIN_SPEED
from voice.errors import RequestInvalid
from voice.queueing import PRIORITIES
from voice.voices import Voice, resolve_voice
from workbench.safety import MAX_JSON_DEPTH, json_depth

MAX_TITLE_CHARS = 200


@dataclass(frozen=True)
class NotifyRequest:
    message: str
    voice: Voice
    speed: float = 1.0
    volume: float = 1.0
    title: str | None = None
    priority: str = "normal"


@dataclass(frozen=True)
class SpeechRequest:
    """OpenAI-style ``POST /v1/audio/speech``: input, voice, speed, response_format."""

    input: str
    voice: Voice
    speed: float = 1.0
    response_format: str = "wav"


SPEECH_FORMATS = ("wav", "pcm")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        raise RequestInvalid("request body is empty; send a JSON object such as "
                             '{"message": "Hello", "voice_id": "1"}')  # fmt: skip
    if json_depth(raw) > MAX_JSON_DEPTH:
        raise RequestInvalid(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestInvalid(f"request body is not valid JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestInvalid(f"request body must be a JSON object, got {type(body).__name__}")
    return body


def _text(body: dict[str, Any], name: str, limit: int) -> str:
    value = body.get(name)
    if value is None:
        raise RequestInvalid(f"'{name}' is required: the text to speak")
    if not isinstance(value, str):
        raise RequestInvalid(f"'{name}' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise RequestInvalid(f"'{name}' must not be empty")
    if len(value) > limit:
        raise RequestInvalid(f"'{name}' is {len(value)} characters; the limit is {limit}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate such as "\ud800": not speakable text
        raise RequestInvalid(
            f"'{name}' holds an invalid character at {exc.start} (a lone "
            "UTF-16 surrogate); send real Unicode text"
        ) from None
    return value.strip()


def _number(value: object, name: str, low: float, high: float, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RequestInvalid(f"'{name}' must be a number from {low} to {high}, got {value!r}")
    if not low <= value <= high:
        raise RequestInvalid(f"'{name}' must be from {low} to {high}, got {value}")
    return float(value)


def _speed(settings: object) -> float:
    if settings is None:
        return 1.0
    if not isinstance(settings, dict):
        raise RequestInvalid("'voice_settings' must be an object such as {\"speed\": 1.2}")
    return _number(settings.get("speed"), "voice_settings.speed", MIN_SPEED, MAX_SPEED, 1.0)


def _title(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_TITLE_CHARS:
        raise RequestInvalid(f"'title' must be a string of at most {MAX_TITLE_CHARS} characters")
    return value


def _priority(value: object) -> str:
    if value is None:
        return "normal"
    if not isinstance(value, str) or value not in PRIORITIES:
        raise RequestInvalid(
            f"'priority' must be one of {', '.join(repr(p) for p in PRIORITIES)}, got {value!r}"
        )
    return str(value)


def parse_notify(raw: bytes, max_chars: int, default_voice_id: str = "1") -> NotifyRequest:
    body = parse_json_object(raw)
    return NotifyRequest(
        message=_text(body, "message", max_chars),
        voice=resolve_voice(body.get("voice_id", default_voice_id)),
        speed=_speed(body.get("voice_settings")),
        volume=_number(body.get("volume"), "volume", 0.0, 1.0, 1.0),
        title=_title(body.get("title")),
        priority=_priority(body.get("priority")),
    )


def parse_speech(raw: bytes, max_chars: int, default_voice_id: str = "1") -> SpeechRequest:
    body = parse_json_object(raw)
    fmt = body.get("response_format", "wav")
    if fmt not in SPEECH_FORMATS:
        raise RequestInvalid(
            f"'response_format' must be one of {', '.join(SPEECH_FORMATS)}, got {fmt!r}"
        )
    return SpeechRequest(
        input=_text(body, "input", max_chars),
        voice=resolve_voice(body.get("voice", default_voice_id)),
        speed=_number(body.get("speed"), "speed", MIN_SPEED, MAX_SPEED, 1.0),
        response_format=fmt,
    )
