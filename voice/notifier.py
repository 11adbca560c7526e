"""The playback queue: notifications are spoken one at a time, by priority and in the order
they arrived.

``submit`` never blocks: a full queue raises QueueFull. One worker thread takes each
notification and, unless it waited longer than ``max_wait`` (then it is dropped as
``expired``), plays it: from the audio cache when the same text, voice and speed were
synthesized before, else streamed from the engine (``chunks_for``) through
:class:`voice.playback.PacedChunks`, which holds the first sound back until the rest can keep
up, then stored in the cache. With no audio output the speech is still synthesized, then
dropped (logged). Before the first notification the worker warms the engine (one short
inference) and then synthesizes the warm-up phrases into the cache while nothing waits.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from voice.audio import AudioSink
from voice.cache import AudioCache, cache_key
from voice.engine import Engine
from voice.errors import AudioUnavailable, VoiceError
from voice.metrics import VoiceMetrics
from voice.pacing import HostSpeed
from voice.playback import PacedChunks
from voice.pronunciation import NO_RULES, Rules, apply_rules
from voice.queueing import PlaybackQueue, expired
from voice.speech import Speech, pauses_after, stream_speech
from voice.text import Chunk, plan_chunks
from voice.voices import Voice

log = logging.getLogger(__name__)
# Synthesized (not played) at start: the first inference pays one-off allocations, and three
# calls of different lengths let the speed estimate fit the fixed cost of a call apart from the
# cost per audio second, so that the first notification is paced on this host's figures.
WARM_TEXTS = (
    "Ready.",
    "The voice server is ready.",
    "The voice server is ready to speak, and this longer sentence measures how fast it is.",
)


HEAD_MAX_RTF = 1.0  # recent real-time factor above which sentences are not cut (see _head_helps)


@dataclass(frozen=True)
class Notification:
    id: str
    speech: Speech
    title: str | None = None
    received_at: float = field(default_factory=time.perf_counter)
    priority: str = "normal"


@dataclass
class Outcome:
    """What happened to one notification."""

    id: str
    result: str  # "played" | "dropped" | "failed" | "expired"
    sentences: int = 0
    audio_seconds: float = 0.0
    first_audio_seconds: float | None = None  # from dequeue to first chunk handed to the sink
    queue_wait_seconds: float = 0.0
    error: str | None = None
    source: str = "engine"  # "engine" | "cache"
    priority: str = "normal"
    held_seconds: float = 0.0  # first sound held back so that the rest keeps up
    stalls: int = 0  # times the audio ran dry mid-speech
    stall_seconds: float = 0.0

    @property
    def request_to_first_audio_seconds(self) -> float | None:
        if self.first_audio_seconds is None:
            return None
        return self.queue_wait_seconds + self.first_audio_seconds


class Meter:
    """Hears every engine call: the host's speed estimate and the synthesis-time histogram."""

    def __init__(self, speed: HostSpeed, metrics: VoiceMetrics | None) -> None:
        self.speed, self.metrics = speed, metrics

    def synthesized(self, text: str, speech: Speech, audio_seconds: float, wall: float) -> None:
        self.speed.record(audio_seconds, wall)
        self.speed.learn_duration(text, speech.voice.language, speech.speed, audio_seconds)
        if self.metrics is not None:
            self.metrics.synthesis.observe(wall)


class Notifier:
    def __init__(
        self,
        engine: Engine,
        sink: AudioSink,
        rules: Callable[[], Rules] = lambda: NO_RULES,
        capacity: int = 16,
        history: int = 50,
        *,
        cache: AudioCache | None = None,
        metrics: VoiceMetrics | None = None,
        speed: HostSpeed | None = None,
        max_wait: float = 0.0,
    ) -> None:
        self.engine, self.sink, self.rules = engine, sink, rules
        self.capacity, self.max_wait = capacity, max_wait
        self.cache, self.metrics = cache, metrics
        self.speed = speed or HostSpeed()
        self.meter = Meter(self.speed, metrics)
        self._queue: PlaybackQueue[Notification] = PlaybackQueue(capacity)
        self._history_size = history
        self.outcomes: list[Outcome] = []
        self.stalls = 0
        self.current: str | None = None
        self._warm: list[Speech] = []
        self._warm_voice: Voice | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- control -----------------------------------------------------------------------------
    def warm_up(self, voice: Voice, phrases: Iterable[str] = ()) -> None:
        """After start, warm the engine with a few inferences (``WARM_TEXTS``) in ``voice``,
        then synthesize ``phrases`` into the cache while no notification waits."""
        self._warm_voice = voice
        self._warm = [Speech(phrase, voice) for phrase in phrases if phrase.strip()]

    def start(self) -> None:
        if self._thread is None:
            self._stopping.clear()
            self._thread = threading.Thread(target=self._run, name="voice-notifier", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop once every accepted notification is spoken, waiting up to ``timeout`` seconds;
        what is still waiting then is discarded (logged with the count)."""
        if self._thread is None:
            return
        self._queue.close()  # the worker speaks what is queued, then ends
        self._thread.join(max(0.0, timeout))
        if self._thread.is_alive():
            self._stopping.set()  # the worker stops after the notification it is speaking
        self._thread = None
        if waiting := len(self._queue.clear()):
            log.warning(
                "voice server stopping: %d queued notification(s) discarded after "
                "waiting %.0f s for them",
                waiting,
                timeout,
            )

    def submit(self, notification: Notification) -> int:
        """Queue a notification; its place in the queue (1: next). Raises QueueFull."""
        return self._queue.put(notification, notification.priority)

    # -- state -------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self._queue)

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until nothing is queued or playing; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.depth == 0 and self.current is None, timeout)

    def last(self) -> Outcome | None:
        return self.outcomes[-1] if self.outcomes else None

    # -- worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        self._prepare()
        while not self._stopping.is_set():
            item = self._queue.get(timeout=0 if self._warm else None)
            if item is None:
                if not self._warm or self._queue.closed:
                    return  # closed and drained (warm-up phrases left are not worth a wait)
                self._warm_one(self._warm.pop(0))
                continue
            with self._changed:
                self.current = item.id
            outcome = self._speak(item)
            with self._changed:
                self.current = None
                self.outcomes = [*self.outcomes, outcome][-self._history_size :]
                self._changed.notify_all()

    def _prepare(self) -> None:
        try:
            self.engine.load()
            if self._warm_voice is not None:
                warm = Speech(" ".join(WARM_TEXTS), self._warm_voice)
                list(stream_speech(self.engine, warm, WARM_TEXTS, len(WARM_TEXTS), self.meter))
        except VoiceError as exc:
            log.error("%s", exc)
            self._warm = []

    def _warm_one(self, speech: Speech) -> None:
        """Synthesize one warm-up phrase into the cache (unless it is there)."""
        text = apply_rules(speech.text, self.rules())
        key = self._key(text, speech)
        if self.cache is None or key is None or self.cache.path(key).exists():
            return
        try:
            plan = plan_chunks(text)
            chunks = list(stream_speech(self.engine, speech, plan, len(plan), self.meter))
        except VoiceError as exc:
            log.warning("warm-up phrase %r not synthesized: %s", speech.text[:40], exc)
            return
        self.cache.put(key, _joined(chunks), self.engine.sample_rate)
        log.info("warm-up phrase %r synthesized into the cache", speech.text[:40])

    def _head_helps(self) -> bool:
        """Cut a short head off the first sentence only while this host synthesizes faster than
        it speaks: slower, the first sound waits for most of the message anyway (pacing), and
        the extra engine calls of the cut only add work and so delay it further."""
        rtf = self.speed.snapshot().rtf
        return rtf is None or rtf < HEAD_MAX_RTF

    def _key(self, text: str, speech: Speech) -> str | None:
        if self.cache is None or not self.cache.enabled:
            return None
        version = getattr(self.engine, "version", self.engine.name)
        return cache_key(text, speech.voice.name, speech.speed, speech.voice.language, version)

    def _speak(self, note: Notification) -> Outcome:
        started = time.perf_counter()
        wait = started - note.received_at
        outcome = Outcome(note.id, "played", queue_wait_seconds=wait, priority=note.priority)
        if self.metrics is not None:
            self.metrics.queue_wait.observe(wait)
        if expired(note.received_at, started, self.max_wait):
            return self._expire(outcome)
        text = apply_rules(note.speech.text, self.rules())
        plan = plan_chunks(text, head=self._head_helps())
        outcome.sentences = sum(chunk.ends == "sentence" for chunk in plan)
        key = self._key(text, note.speech)
        speech = dataclasses.replace(note.speech, volume=1.0)  # volume applied on the way out
        chunks, paced = self._source(key, speech, plan, outcome)
        kept: list[np.ndarray] = []
        measured = self._measured(chunks, outcome, started, note.speech.volume, kept)
        try:
            self._play(measured, outcome)
        except Exception as exc:  # a notification must never stop the worker
            outcome.result, outcome.error = "failed", str(exc)
            log.error("notification %s failed: %s", note.id, exc)
        finally:
            measured.close()
            if paced is not None:
                paced.close()
        if paced is not None:
            self._paced(paced, outcome)
            if outcome.error is None and len(kept) == len(plan) and key and self.cache:
                self.cache.put(key, _joined(kept), self.engine.sample_rate)
        self._finish(outcome)
        return outcome

    def _source(
        self, key: str | None, speech: Speech, plan: list[Chunk], outcome: Outcome
    ) -> tuple[Iterator[np.ndarray], PacedChunks | None]:
        """The cached audio, or the engine's stream paced (synthesis starts here, before the
        sink opens its output, which can take a few hundred ms)."""
        if key is not None and self.cache is not None:
            entry, lookup = self.cache.get(key)
            if self.metrics is not None:
                self.metrics.cache.labels(lookup).inc()
            if entry is not None:
                outcome.source = "cache"
                return iter([entry[0]]), None
        rate = self.engine.sample_rate
        stream = stream_speech(self.engine, speech, plan, len(plan) + 1, self.meter).start()
        language, speed = speech.voice.language, speech.speed
        estimates = [
            self.speed.duration(chunk.text, language, speed) + pause / rate
            for chunk, pause in zip(plan, pauses_after(plan, rate), strict=True)
        ]
        paced = PacedChunks(stream, estimates, self.speed.cost, rate)
        return paced, paced

    def _paced(self, paced: PacedChunks, outcome: Outcome) -> None:
        report = paced.report
        outcome.held_seconds = report.held_seconds
        outcome.stalls, outcome.stall_seconds = report.stalls, report.stall_seconds
        if self.metrics is not None:
            self.metrics.held.observe(report.held_seconds)
        if report.stalls:
            self.stalls += report.stalls
            if self.metrics is not None:
                self.metrics.stalls.inc(report.stalls)
                self.metrics.stall_seconds.inc(report.stall_seconds)
            log.warning(
                "notification %s stalled %d time(s), %.2fs of silence mid-speech (before "
                "chunk(s) %s); recent RTF %s",
                outcome.id, report.stalls, report.stall_seconds, report.stall_chunks,
                _rtf_text(self.speed.snapshot().rtf),
            )  # fmt: skip

    def _expire(self, outcome: Outcome) -> Outcome:
        outcome.result = "expired"
        log.warning("notification %s expired: it waited %.1fs, longer than the %.0fs allowed "
                    "(VOICE_MAX_WAIT_SECONDS); not spoken", outcome.id,
                    outcome.queue_wait_seconds, self.max_wait)  # fmt: skip
        self._finish(outcome)
        return outcome

    def _finish(self, outcome: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.outcome(outcome.result)
            if outcome.first_audio_seconds is not None:
                self.metrics.first_audio.labels(outcome.source).observe(outcome.first_audio_seconds)
        if outcome.result == "expired":
            return
        log.info(
            "notification %s %s (%s): %d sentence(s), %.2fs audio, first audio after %s",
            outcome.id, outcome.result, outcome.source, outcome.sentences, outcome.audio_seconds,
            "-" if outcome.first_audio_seconds is None else f"{outcome.first_audio_seconds:.2f}s",
        )  # fmt: skip

    def _play(self, chunks: Iterator[np.ndarray], outcome: Outcome) -> None:
        status = self.sink.status()
        if not status.available:
            _drain(chunks)
            outcome.result = "dropped"
            log.warning("audio unavailable (%s): notification %s synthesized and dropped",
                        status.detail, outcome.id)  # fmt: skip
            return
        try:
            self.sink.play(chunks, self.engine.sample_rate)
        except AudioUnavailable as exc:
            _drain(chunks)
            outcome.result, outcome.error = "dropped", str(exc)
            log.warning("audio unavailable (%s): notification %s dropped", exc, outcome.id)

    def _measured(
        self,
        chunks: Iterable[np.ndarray],
        outcome: Outcome,
        started: float,
        volume: float,
        kept: list[np.ndarray],
    ) -> Generator[np.ndarray, None, None]:
        for chunk in chunks:
            kept.append(chunk)
            if outcome.first_audio_seconds is None:
                outcome.first_audio_seconds = time.perf_counter() - started
            outcome.audio_seconds += len(chunk) / self.engine.sample_rate
            yield chunk if volume == 1.0 else (chunk * np.float32(volume)).astype(np.float32)


def _joined(chunks: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)


def _rtf_text(rtf: float | None) -> str:
    return "-" if rtf is None else f"{rtf:.2f}"


def _drain(chunks: Iterable[np.ndarray]) -> None:
    for _ in chunks:
        pass
