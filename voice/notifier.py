"""The playback queue: notifications are spoken one at a time, in the order they arrived.

``submit`` never blocks: a full queue raises QueueFull. One worker thread takes each notification,
streams its chunks (``chunks_for``) from the engine into the audio sink, and records how long the
first sound took. With no audio output the speech is still synthesized, then dropped (logged).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from voice.audio import AudioSink
from voice.engine import Engine
from voice.errors import AudioUnavailable, BackendMissing, QueueFull
from voice.pronunciation import NO_RULES, Rules
from voice.speech import Speech, chunks_for, stream_speech

log = logging.getLogger(__name__)
_STOP = object()


@dataclass(frozen=True)
class Notification:
    id: str
    speech: Speech
    title: str | None = None
    received_at: float = field(default_factory=time.perf_counter)


@dataclass
class Outcome:
    """What happened to one notification."""

    id: str
    result: str  # "played" | "dropped" | "failed"
    sentences: int = 0
    audio_seconds: float = 0.0
    first_audio_seconds: float | None = None  # from dequeue to first chunk handed to the sink
    queue_wait_seconds: float = 0.0
    error: str | None = None


class Notifier:
    def __init__(
        self,
        engine: Engine,
        sink: AudioSink,
        rules: Callable[[], Rules] = lambda: NO_RULES,
        capacity: int = 16,
        history: int = 50,
    ) -> None:
        self.engine, self.sink, self.rules = engine, sink, rules
        self.capacity = capacity
        self._queue: queue.Queue = queue.Queue(maxsize=capacity)
        self._history_size = history
        self.outcomes: list[Outcome] = []
        self.current: str | None = None
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    # -- control -----------------------------------------------------------------------------
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
        deadline = time.monotonic() + timeout
        try:  # after the last accepted one: the worker speaks them all first
            self._queue.put(_STOP, timeout=max(0.0, timeout))
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            self._stopping.set()  # the worker stops after the notification it is speaking
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_STOP)
        self._thread = None
        if waiting := sum(1 for item in list(self._queue.queue) if item is not _STOP):
            log.warning(
                "voice server stopping: %d queued notification(s) discarded after "
                "waiting %.0f s for them",
                waiting,
                timeout,
            )

    def submit(self, notification: Notification) -> None:
        try:
            self._queue.put_nowait(notification)
        except queue.Full:
            raise QueueFull(
                f"the playback queue is full ({self.capacity} notifications waiting); retry later"
            ) from None

    # -- state -------------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until nothing is queued or playing; False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.depth == 0 and self.current is None, timeout)

    def last(self) -> Outcome | None:
        return self.outcomes[-1] if self.outcomes else None

    # -- worker ------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.engine.load()
        except BackendMissing as exc:
            log.error("%s", exc)
        while not self._stopping.is_set() and (item := self._queue.get()) is not _STOP:
            with self._changed:
                self.current = item.id
            outcome = self._speak(item)
            with self._changed:
                self.current = None
                self.outcomes = [*self.outcomes, outcome][-self._history_size :]
                self._changed.notify_all()

    def _speak(self, note: Notification) -> Outcome:
        started = time.perf_counter()
        outcome = Outcome(note.id, "played", queue_wait_seconds=started - note.received_at)
        plan = chunks_for(note.speech.text, self.rules())
        outcome.sentences = sum(chunk.ends == "sentence" for chunk in plan)
        # Synthesis starts before the sink opens its output, which can take a few hundred ms.
        stream = stream_speech(self.engine, note.speech, plan).start()
        chunks = self._measured(stream, outcome, started)
        try:
            self._play(chunks, outcome)
        except Exception as exc:  # a notification must never stop the worker
            outcome.result, outcome.error = "failed", str(exc)
            log.error("notification %s failed: %s", note.id, exc)
        finally:
            chunks.close()
            stream.close()
        log.info(
            "notification %s %s: %d sentence(s), %.2fs audio, first audio after %s",
            note.id, outcome.result, outcome.sentences, outcome.audio_seconds,
            "-" if outcome.first_audio_seconds is None else f"{outcome.first_audio_seconds:.2f}s",
        )  # fmt: skip
        return outcome

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
        self, chunks: Iterable[np.ndarray], outcome: Outcome, started: float
    ) -> Iterator[np.ndarray]:
        for chunk in chunks:
            if outcome.first_audio_seconds is None:
                outcome.first_audio_seconds = time.perf_counter() - started
            outcome.audio_seconds += len(chunk) / self.engine.sample_rate
            yield chunk


def _drain(chunks: Iterable[np.ndarray]) -> None:
    for _ in chunks:
        pass
