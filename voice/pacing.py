"""Never starve the speaker: when playback of a streamed speech may start (pure), and how fast
this host synthesizes right now (a small thread-safe estimator fed by every engine call).

The rule (:func:`start_delay`): chunk *j* is ready when the chunks before it and itself have
been synthesized, and playback reaches it when everything before it has been played. Playback
starts only once every chunk still to come is predicted to be ready before playback reaches it
(with ``margin`` seconds to spare); until then the first sound waits, which is heard as a
slightly later start instead of a gap in the middle of a sentence. The prediction uses the cost
of an engine call measured on this host, recently, under the current load (:class:`HostSpeed`),
and is made again each time a chunk arrives, so a host that slows down mid-message is caught
before the first sound rather than after.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# Seconds of audio per character at speed 1.0 before anything was measured: Kokoro speaks
# about 14 characters a second in alphabetic scripts and 4-5 in Chinese and Japanese.
PRIOR_SECONDS_PER_CHAR = {"zh": 0.22, "ja": 0.13}
PRIOR_LATIN_SECONDS_PER_CHAR = 0.07
# Engine cost before anything was measured: deliberately slow (a host twice as slow as real
# time), so the first notification after start waits rather than stalls.
PRIOR_CALL_SECONDS, PRIOR_RTF = 0.2, 1.0
DEFAULT_MARGIN = 0.1  # seconds of slack kept at every chunk boundary
SPREAD_FACTOR = 2.0  # planning cost: the fitted cost times (1 + this x the recent spread)


def start_delay(
    buffered: float,
    pending: Sequence[float],
    cost: Callable[[float], float],
    busy: float = 0.0,
    margin: float = DEFAULT_MARGIN,
) -> float:
    """Seconds to wait before playback starts so that no chunk arrives after playback needs it.

    ``buffered``: audio seconds already synthesized (ready to play). ``pending``: estimated audio
    seconds of each chunk still to come, in order (``pending[0]`` is being synthesized now and
    has been for ``busy`` seconds). ``cost(seconds)``: predicted wall seconds to synthesize a
    chunk of that much audio. 0 when playback may start now.

    >>> start_delay(1.0, [2.0], lambda s: 0.5 * s)   # 1 s of synthesis while 1 s plays: go
    0.0
    >>> round(start_delay(1.0, [2.0], lambda s: 1.0 * s, margin=0.0), 3)  # 2 s needed, 1 s played
    1.0
    """
    delay, ready_at, plays_at = 0.0, -busy, buffered
    for seconds in pending:
        ready_at = max(0.0, ready_at + cost(seconds))
        delay = max(delay, ready_at + margin - plays_at)
        plays_at += seconds
    return delay


def stall_after(playing_until: float, arrived_at: float, tolerance: float = 0.03) -> float:
    """Seconds of silence a real-time output played waiting for a chunk that arrived at
    ``arrived_at`` when the audio handed before it ran out at ``playing_until`` (0 within
    ``tolerance``, a gap nobody hears)."""
    gap = arrived_at - playing_until
    return gap if gap > tolerance else 0.0


@dataclass(frozen=True)
class SpeedSnapshot:
    """What :class:`HostSpeed` knows now."""

    rtf: float | None  # synthesis seconds per audio second over recent calls (None: no call yet)
    per_call: float  # fitted fixed cost of one engine call, seconds
    per_second: float  # fitted cost per audio second
    spread: float  # recent relative error of the fit (0.2: calls took 20 % more or less)
    samples: int


class HostSpeed:
    """A moving estimate of what an engine call costs on this host, now.

    Each call's (audio seconds, wall seconds) goes into exponentially weighted sums that forget
    a measurement by ``keep`` per newer call and by half every ``half_life`` seconds, so the
    estimate follows the load. The cost of a call is fitted as ``per_call + per_second * audio``
    (a short chunk pays a fixed cost: the model renders silence around every call); with too
    few or too similar calls it falls back to a plain ratio. Durations per character are learnt
    per language the same way, to predict how long a chunk not yet synthesized will play.
    """

    def __init__(
        self,
        keep: float = 0.8,
        half_life: float = 120.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.keep, self.half_life, self.clock = keep, half_life, clock
        self._sums = [0.0] * 5  # weight, x, y, xx, xy  (x: audio s, y: wall s)
        self._spread = 0.15
        self._updated: float | None = None
        self._samples = 0
        self._per_char: dict[str, float] = {}
        self._lock = threading.Lock()

    def record(self, audio_seconds: float, wall_seconds: float) -> None:
        """One engine call: it made ``audio_seconds`` of audio in ``wall_seconds``."""
        if audio_seconds <= 0 or wall_seconds < 0:
            return
        with self._lock:
            predicted = self._cost_locked(audio_seconds)
            error = abs(wall_seconds / predicted - 1.0) if predicted > 0 else 0.0
            self._spread = min(1.0, self._spread * self.keep + error * (1 - self.keep))
            self._fade_locked()
            x, y = audio_seconds, wall_seconds
            for index, value in enumerate((1.0, x, y, x * x, x * y)):
                self._sums[index] += value
            self._samples += 1

    def learn_duration(self, text: str, language: str, speed: float, audio_seconds: float) -> None:
        """A chunk of ``text`` played ``audio_seconds`` at ``speed``."""
        chars = _spoken_chars(text)
        if chars == 0 or audio_seconds <= 0:
            return
        rate = audio_seconds * speed / chars
        with self._lock:
            old = self._per_char.get(language)
            self._per_char[language] = rate if old is None else old * 0.7 + rate * 0.3

    def duration(self, text: str, language: str, speed: float = 1.0) -> float:
        """Predicted audio seconds of ``text`` (before synthesis)."""
        with self._lock:
            rate = self._per_char.get(language)
        if rate is None:
            rate = PRIOR_SECONDS_PER_CHAR.get(language, PRIOR_LATIN_SECONDS_PER_CHAR)
        return _spoken_chars(text) * rate / speed

    def cost(self, audio_seconds: float) -> float:
        """Predicted wall seconds to synthesize ``audio_seconds``, with twice the recent spread
        added (planning must be pessimistic: a late chunk is a gap, an early one costs nothing;
        twice the mean deviation covers most calls of a host whose load comes and goes)."""
        with self._lock:
            return self._cost_locked(audio_seconds) * (1.0 + SPREAD_FACTOR * self._spread)

    def snapshot(self) -> SpeedSnapshot:
        with self._lock:
            per_call, per_second = self._fit_locked()
            weight, x, y = self._sums[:3]
            rtf = y / x if x > 0 and weight > 0 else None
            return SpeedSnapshot(rtf, per_call, per_second, self._spread, self._samples)

    # -- inside the lock -----------------------------------------------------------------------
    def _fade_locked(self) -> None:
        now = self.clock()
        factor = self.keep
        if self._updated is not None and self.half_life > 0:
            factor *= 0.5 ** (max(0.0, now - self._updated) / self.half_life)
        self._sums = [value * factor for value in self._sums]
        self._updated = now

    def _cost_locked(self, audio_seconds: float) -> float:
        per_call, per_second = self._fit_locked()
        return per_call + per_second * audio_seconds

    def _fit_locked(self) -> tuple[float, float]:
        weight, x, y, xx, xy = self._sums
        if weight <= 1e-9 or x <= 0:
            return PRIOR_CALL_SECONDS, PRIOR_RTF
        mean_x, mean_y = x / weight, y / weight
        variance = xx / weight - mean_x**2
        if self._samples >= 3 and variance > 0.04 * mean_x**2:
            slope = (xy / weight - mean_x * mean_y) / variance
            intercept = mean_y - slope * mean_x
            if slope > 0.02 and intercept >= 0:
                return intercept, slope
        return 0.0, mean_y / mean_x


def _spoken_chars(text: str) -> int:
    return sum(1 for char in text if char.isalnum())
