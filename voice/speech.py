"""From a message to a stream of audio chunks, one per sentence, synthesized ahead of playback.

``stream_speech`` synthesizes sentence *n+1* on a worker thread while sentence *n* is being
played (or sent), so the first sound comes after one sentence's synthesis, not the whole text's.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from voice.engine import Engine
from voice.pronunciation import NO_RULES, Rules, apply_rules
from voice.text import split_sentences
from voice.voices import Voice

SENTENCE_PAUSE = 0.2  # seconds of silence between sentences
_DONE = object()


@dataclass(frozen=True)
class Speech:
    """What to say and how: the unit a notification or a speech request turns into."""

    text: str
    voice: Voice
    speed: float = 1.0
    volume: float = 1.0


def sentences_for(text: str, rules: Rules = NO_RULES) -> list[str]:
    """The sentences to synthesize, pronunciation rules applied."""
    return split_sentences(apply_rules(text, rules))


def shape_chunk(audio: np.ndarray, volume: float, pause_samples: int) -> np.ndarray:
    """Scale by ``volume``, clip to [-1, 1] and append ``pause_samples`` of silence."""
    scaled = np.clip(audio * np.float32(volume), -1.0, 1.0).astype(np.float32)
    if pause_samples <= 0:
        return scaled
    return np.concatenate([scaled, np.zeros(pause_samples, dtype=np.float32)])


def _produce(
    engine: Engine, speech: Speech, sentences: list[str], out: queue.Queue, stop: threading.Event
) -> None:
    pause = int(SENTENCE_PAUSE * engine.sample_rate)
    try:
        for index, sentence in enumerate(sentences):
            if stop.is_set():
                return
            audio = engine.synthesize(sentence, speech.voice, speech.speed)
            last = index == len(sentences) - 1
            _put(out, shape_chunk(audio, speech.volume, 0 if last else pause), stop)
        _put(out, _DONE, stop)
    except BaseException as exc:  # handed to the consumer, which re-raises it
        _put(out, exc, stop)


def _put(out: queue.Queue, item: object, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


def stream_speech(
    engine: Engine, speech: Speech, sentences: list[str], lookahead: int = 1
) -> Iterator[np.ndarray]:
    """Yield one float32 chunk per sentence, in order, synthesizing ahead on a thread."""
    out: queue.Queue = queue.Queue(maxsize=max(1, lookahead))
    stop = threading.Event()
    worker = threading.Thread(
        target=_produce,
        args=(engine, speech, sentences, out, stop),
        name="voice-synth",
        daemon=True,
    )
    worker.start()
    try:
        while (item := out.get()) is not _DONE:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
