"""From a message to a stream of audio chunks, synthesized ahead of playback.

``chunks_for`` plans the chunks (``voice.text.plan_chunks``: one per sentence, the first sentence
cut after a short head); ``stream_speech`` synthesizes chunk *n+1* on a worker thread while chunk
*n* is being played (or sent), so the first sound comes after a few words' synthesis, not the
whole text's. Each chunk is followed by the pause its boundary calls for. The notifier starts the
synthesis before it opens the audio output, so opening the device does not delay the first sound.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from voice.engine import Engine
from voice.pronunciation import NO_RULES, Rules, apply_rules
from voice.text import Boundary, Chunk, plan_chunks, split_sentences
from voice.voices import Voice

SENTENCE_PAUSE = 0.2  # seconds of silence between sentences
# No pause is added at a cut inside a sentence (at a comma or between words), and the quiet edges
# kokoro-onnx leaves on each side of it (~0.1-0.25 s together, where the whole sentence had
# 0.01-0.07 s) are trimmed down to JOIN_MARGIN each, so the two chunks join like one phrase.
CUT_PAUSE = 0.0
JOIN_MARGIN = 0.02  # seconds of the quiet edge kept on each side of a cut
QUIET_DB = -40.0  # a 10 ms frame this far below the chunk's loudest counts as quiet
PAUSES: dict[Boundary, float] = {"sentence": SENTENCE_PAUSE, "clause": CUT_PAUSE, "word": CUT_PAUSE}
_DONE = object()


@dataclass(frozen=True)
class Speech:
    """What to say and how: the unit a notification or a speech request turns into."""

    text: str
    voice: Voice
    speed: float = 1.0
    volume: float = 1.0


class SynthesisMeter(Protocol):
    """Told about every engine call of a stream (the host's speed estimate, the metrics)."""

    def synthesized(
        self, text: str, speech: Speech, audio_seconds: float, wall_seconds: float
    ) -> None: ...


def sentences_for(text: str, rules: Rules = NO_RULES) -> list[str]:
    """The sentences of ``text``, pronunciation rules applied."""
    return split_sentences(apply_rules(text, rules))


def chunks_for(text: str, rules: Rules = NO_RULES) -> list[Chunk]:
    """The chunks to synthesize, in order, pronunciation rules applied (what the server plays)."""
    return plan_chunks(apply_rules(text, rules))


def pauses_after(chunks: Sequence[Chunk], sample_rate: int) -> list[int]:
    """Samples of silence after each chunk: its boundary's pause, none after the last."""
    return [
        0 if index == len(chunks) - 1 else int(PAUSES[chunk.ends] * sample_rate)
        for index, chunk in enumerate(chunks)
    ]


def trim_quiet_edges(
    audio: np.ndarray, sample_rate: int, start: bool, end: bool, margin: float = JOIN_MARGIN
) -> np.ndarray:
    """Cut the quiet (``QUIET_DB`` below the loudest 10 ms frame) off the start and/or end of
    ``audio``, keeping ``margin`` seconds of it; silent or all-loud audio comes back whole."""
    frame = max(1, sample_rate // 100)
    usable = len(audio) // frame * frame
    if not (start or end) or usable == 0:
        return audio
    energy = np.sqrt(np.square(audio[:usable], dtype=np.float64).reshape(-1, frame).mean(1))
    loud = np.flatnonzero(energy > energy.max() * 10 ** (QUIET_DB / 20))
    if energy.max() == 0 or len(loud) == 0:
        return audio
    keep = int(margin * sample_rate)
    first = max(0, loud[0] * frame - keep) if start else 0
    last = min(len(audio), (loud[-1] + 1) * frame + keep) if end else len(audio)
    return audio[first:last]


def shape_chunk(audio: np.ndarray, volume: float, pause_samples: int) -> np.ndarray:
    """Scale by ``volume``, clip to [-1, 1] and append ``pause_samples`` of silence."""
    scaled = np.clip(audio * np.float32(volume), -1.0, 1.0).astype(np.float32)
    if pause_samples <= 0:
        return scaled
    return np.concatenate([scaled, np.zeros(pause_samples, dtype=np.float32)])


def _produce(
    engine: Engine,
    speech: Speech,
    chunks: list[Chunk],
    out: queue.Queue[object],
    stop: threading.Event,
    meter: SynthesisMeter | None,
) -> None:
    try:
        pauses = pauses_after(chunks, engine.sample_rate)
        for index, (chunk, pause) in enumerate(zip(chunks, pauses, strict=True)):
            if stop.is_set():
                return
            started = time.perf_counter()
            audio = engine.synthesize(chunk.text, speech.voice, speech.speed)
            wall = time.perf_counter() - started
            cut_before = index > 0 and chunks[index - 1].ends != "sentence"
            cut_after = chunk.ends != "sentence" and index < len(chunks) - 1
            audio = trim_quiet_edges(audio, engine.sample_rate, cut_before, cut_after)
            if meter is not None:
                meter.synthesized(chunk.text, speech, len(audio) / engine.sample_rate, wall)
            _put(out, shape_chunk(audio, speech.volume, pause), stop)
        _put(out, _DONE, stop)
    except BaseException as exc:  # handed to the consumer, which re-raises it
        _put(out, exc, stop)


def _put(out: queue.Queue[object], item: object, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            out.put(item, timeout=0.1)
            return
        except queue.Full:
            continue


class SpeechStream(Iterator[np.ndarray]):
    """The chunks of one speech, in order, synthesized ahead on a worker thread.

    Synthesis starts at :meth:`start` or at the first ``next``, whichever comes first, so a
    caller can start it and then open its audio output (which can take a few hundred ms) while
    the first chunk is being synthesized. :meth:`close` stops the worker.
    """

    def __init__(
        self,
        engine: Engine,
        speech: Speech,
        plan: list[Chunk],
        lookahead: int,
        meter: SynthesisMeter | None = None,
    ) -> None:
        self.plan = plan
        self._out: queue.Queue[object] = queue.Queue(maxsize=max(1, lookahead))
        self._stop = threading.Event()
        self._worker = threading.Thread(
            target=_produce,
            args=(engine, speech, plan, self._out, self._stop, meter),
            name="voice-synth",
            daemon=True,
        )
        self._lock = threading.Lock()
        self._launched = self._done = False

    def start(self) -> SpeechStream:
        """Start synthesizing now (idempotent); returns the stream."""
        with self._lock:
            if not self._launched and not self._stop.is_set():
                self._launched = True
                self._worker.start()
        return self

    def __next__(self) -> np.ndarray:
        chunk = self.poll(None)
        assert chunk is not None  # no timeout: a chunk, or StopIteration
        return chunk

    def poll(self, timeout: float | None) -> np.ndarray | None:
        """The next chunk, or None when none is ready within ``timeout`` seconds (``None``:
        wait for it); StopIteration after the last, the engine's error if it failed."""
        if self._done:
            raise StopIteration
        self.start()
        try:
            item = self._out.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, np.ndarray):
            return item
        self._done = True  # the end (_DONE), or the engine's error
        self.close()
        if isinstance(item, BaseException):
            raise item
        raise StopIteration

    def close(self) -> None:
        """Stop synthesizing; the stream yields nothing more."""
        self._done = True
        self._stop.set()

    def __del__(self) -> None:
        self._stop.set()


def stream_speech(
    engine: Engine,
    speech: Speech,
    chunks: Sequence[Chunk | str],
    lookahead: int = 1,
    meter: SynthesisMeter | None = None,
) -> SpeechStream:
    """One float32 array per chunk, in order, synthesizing up to ``lookahead`` chunks ahead on
    a thread (see :class:`SpeechStream`; synthesis starts at ``start()`` or the first ``next``).

    ``chunks`` is a plan from ``chunks_for``, or plain sentences (each a whole sentence);
    ``meter`` is told the audio length and wall time of every engine call.
    """
    plan = [c if isinstance(c, Chunk) else Chunk(c) for c in chunks]
    return SpeechStream(engine, speech, plan, lookahead, meter)
