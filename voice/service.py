"""The voice service: what the HTTP handlers call (one method each). Knows nothing of HTTP."""

from __future__ import annotations

import contextlib
import itertools
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from voice.audio import AudioSink
from voice.cache import AudioCache
from voice.engine import Engine
from voice.errors import BackendMissing, QueueFull, RateLimited, RequestInvalid
from voice.metrics import VoiceMetrics
from voice.notifier import Notification, Notifier, Outcome
from voice.payloads import NotifyRequest, SpeechRequest
from voice.pronunciation import RulesFile
from voice.queueing import Duplicates
from voice.ratelimit import RateLimiter
from voice.settings import Settings
from voice.speech import Speech, chunks_for, stream_speech
from voice.voices import numbered_voices, resolve_voice
from voice.wav import to_pcm16, wav_header


@dataclass(frozen=True)
class Accepted:
    """The answer to a notification: queued as ``id``, or a duplicate of ``id`` (not queued)."""

    id: str
    duplicate: bool = False
    seconds_after: float = 0.0  # a duplicate: seconds after the original was accepted
    place: int = 0  # queued: its place in the queue (1: next)


class VoiceService:
    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        sink: AudioSink,
        rules: RulesFile,
        limiter: RateLimiter,
    ) -> None:
        self.settings, self.engine, self.sink = settings, engine, sink
        self.rules, self.limiter = rules, limiter
        self.metrics = VoiceMetrics()
        self.cache = AudioCache(settings.resolved_cache_dir(), int(settings.cache_mb * 2**20))
        self.notifier = Notifier(
            engine, sink, rules.rules, capacity=settings.queue_size,
            cache=self.cache, metrics=self.metrics, max_wait=settings.max_wait_seconds,
        )  # fmt: skip
        self.duplicates = Duplicates(settings.dedupe_seconds)
        self.metrics.watch(
            lambda: self.notifier.depth,
            lambda: self.notifier.speed.snapshot().rtf,
            lambda: self.cache.stats().bytes if self.cache.enabled else 0,
        )
        self.started_at = time.time()
        self._ids = itertools.count(1)

    def start(self) -> None:
        with contextlib.suppress(RequestInvalid):  # a bad default voice: no warm-up
            default = resolve_voice(self.settings.default_voice_id)
            self.notifier.warm_up(default, self.settings.warm_phrases)
        self.notifier.start()

    def stop(self) -> None:
        """Speak what was accepted (up to ``stop_seconds``), then stop."""
        self.notifier.stop(self.settings.stop_seconds)

    def check_rate(self, client: str) -> None:
        if not self.limiter.allow(client):
            wait = self.limiter.retry_after(client)
            raise RateLimited(f"too many requests from {client}; retry in {wait:.1f}s", wait)

    def _require_backend(self) -> None:
        if missing := self.engine.missing():
            raise BackendMissing(missing)

    def notify(self, request: NotifyRequest) -> Accepted:
        """Queue a notification, unless it repeats one accepted within ``dedupe_seconds``.
        Raises BackendMissing or QueueFull."""
        self._require_backend()
        note_id = f"{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        key = (" ".join(request.message.split()), request.voice.name, request.speed)
        if original := self.duplicates.original(key, note_id):
            self.metrics.outcome("duplicate")
            return Accepted(original[0], duplicate=True, seconds_after=original[1])
        speech = Speech(request.message, request.voice, request.speed, request.volume)
        note = Notification(note_id, speech, request.title, priority=request.priority)
        try:
            place = self.notifier.submit(note)
        except QueueFull:
            self.duplicates.forget(key)
            self.metrics.outcome("queue_full")
            raise
        return Accepted(note_id, place=place)

    def speech(self, request: SpeechRequest) -> Iterator[bytes]:
        """The audio of a speech request as a byte stream (WAV header first unless raw PCM).

        Raises BackendMissing at once; synthesis starts when the stream is first read.
        """
        self._require_backend()
        speech = Speech(request.input, request.voice, request.speed)
        plan = chunks_for(speech.text, self.rules.rules())
        header = wav_header(self.engine.sample_rate) if request.response_format == "wav" else b""
        return _encoded(header, stream_speech(self.engine, speech, plan,
                                              meter=self.notifier.meter))  # fmt: skip

    def health(self) -> dict[str, object]:
        missing = self.engine.missing()
        audio = self.sink.status()
        default = resolve_voice(self.settings.default_voice_id)
        last = self.notifier.last()
        problems = [
            p
            for p in (missing, "" if audio.available else f"audio unavailable: {audio.detail}")
            if p
        ]
        return {
            "status": "ok" if not problems else "degraded",
            "message": "; ".join(problems) or "ready",
            "engine": self.engine.name,
            "backend_available": not missing,
            "model_loaded": self.engine.loaded,
            "audio_output_available": audio.available,
            "audio_output": audio.detail,
            "default_voice": {"id": default.id, "name": default.name, "language": default.language},
            "voices": [
                {"id": v.id, "name": v.name, "language": v.language} for v in numbered_voices()
            ],
            "queue_depth": self.notifier.depth,
            "queue_capacity": self.notifier.capacity,
            "playing": self.notifier.current,
            "last_notification": _outcome(last) if last else None,
            "synthesis": self._speed(),
            "cache": self._cache(),
            "pronunciations": self.rules.status(),
            "uptime_seconds": round(time.time() - self.started_at, 1),
        }

    def _speed(self) -> dict[str, object]:
        speed = self.notifier.speed.snapshot()
        return {
            "recent_rtf": None if speed.rtf is None else round(speed.rtf, 3),
            "seconds_per_call": round(speed.per_call, 3),
            "seconds_per_audio_second": round(speed.per_second, 3),
            "spread": round(speed.spread, 3),
            "calls": speed.samples,
            "stalls": self.notifier.stalls,
        }

    def _cache(self) -> dict[str, object]:
        if not self.cache.enabled:
            return {"enabled": False, "path": str(self.cache.directory)}
        stats = self.cache.stats()
        return {"enabled": True, "path": str(self.cache.directory), "entries": stats.entries,
                "bytes": stats.bytes, "max_bytes": stats.max_bytes}  # fmt: skip


def _outcome(outcome: Outcome) -> dict[str, object]:
    fields = dict(outcome.__dict__)
    fields["request_to_first_audio_seconds"] = outcome.request_to_first_audio_seconds
    return fields


def _encoded(header: bytes, chunks: Iterator[np.ndarray]) -> Iterator[bytes]:
    if header:
        yield header
    for chunk in chunks:
        yield to_pcm16(chunk)
