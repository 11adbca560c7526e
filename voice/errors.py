"""Every error the voice server raises on purpose.

    VoiceError                     base; ``str(err)`` says what was wrong and what to do
    ├── RequestInvalid             a request body or field is wrong          -> HTTP 400
    ├── QueueFull                  the playback queue has no room            -> HTTP 429
    ├── RateLimited                one client sent too many requests         -> HTTP 429
    ├── BackendMissing             engine package, model or voices absent    -> HTTP 503
    ├── SynthesisFailed            the engine could not turn text into audio
    ├── AudioUnavailable           no audio output device could be opened
    └── PronunciationFileInvalid   the pronunciation rules file is malformed

The mapping to HTTP lives in one place: ``voice.server``.
"""

from __future__ import annotations


class VoiceError(Exception):
    """Base of every error the voice server raises on purpose."""


class RequestInvalid(VoiceError):
    """A request body or one of its fields is not acceptable."""


class QueueFull(VoiceError):
    """The playback queue is at capacity."""


class RateLimited(VoiceError):
    """A client exceeded its request rate; ``retry_after`` says when it may send again."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BackendMissing(VoiceError):
    """The synthesis backend (package, model file or voices file) is not installed."""


class SynthesisFailed(VoiceError):
    """The engine failed on a text."""


class AudioUnavailable(VoiceError):
    """No audio output device is available."""


class PronunciationFileInvalid(VoiceError):
    """The pronunciation rules file cannot be used."""
