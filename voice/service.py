"""The voice service: what the HTTP handlers call (one method each). Knows nothing of HTTP."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator

from voice.audio import AudioSink
from voice.engine import Engine
from voice.errors import BackendMissing, RateLimited
from voice.notifier import Notification, Notifier
from voice.payloads import NotifyRequest, SpeechRequest
from voice.pronunciation import RulesFile
from voice.ratelimit import RateLimiter
from voice.settings import Settings
from voice.speech import Speech, chunks_for, stream_speech
from voice.voices import numbered_voices, resolve_voice
from voice.wav import to_pcm16, wav_header


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
        self.notifier = Notifier(engine, sink, rules.rules, capacity=settings.queue_size)
        self.started_at = time.time()
        self._ids = itertools.count(1)

    def start(self) -> None:
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

    def notify(self, request: NotifyRequest) -> str:
        """Queue a notification; returns its id. Raises BackendMissing or QueueFull."""
        self._require_backend()
        note_id = f"{next(self._ids)}-{uuid.uuid4().hex[:8]}"
        speech = Speech(request.message, request.voice, request.speed, request.volume)
        self.notifier.submit(Notification(note_id, speech, request.title))
        return note_id

    def speech(self, request: SpeechRequest) -> Iterator[bytes]:
        """The audio of a speech request as a byte stream (WAV header first unless raw PCM).

        Raises BackendMissing at once; synthesis starts when the stream is first read.
        """
        self._require_backend()
        speech = Speech(request.input, request.voice, request.speed)
        plan = chunks_for(speech.text, self.rules.rules())
        header = wav_header(self.engine.sample_rate) if request.response_format == "wav" else b""
        return _encoded(header, stream_speech(self.engine, speech, plan))

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
            "last_notification": last.__dict__ if last else None,
            "pronunciations": self.rules.status(),
            "uptime_seconds": round(time.time() - self.started_at, 1),
        }


def _encoded(header: bytes, chunks: Iterator) -> Iterator[bytes]:
    if header:
        yield header
    for chunk in chunks:
        yield to_pcm16(chunk)
