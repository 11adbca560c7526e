"""Handing a speech's chunks to the audio output without starving it.

:class:`PacedChunks` wraps a :class:`voice.speech.SpeechStream` (which synthesizes ahead
without bound). Before the first sound it keeps taking chunks as they are synthesized until
:func:`voice.pacing.start_delay` says the rest will be ready in time; from then on it hands them
out as the sink asks, and keeps an audio clock (when the audio handed so far runs out, were it
played in real time) to count the stalls that still happen: a chunk that arrived after the clock
ran out left the speaker silent that long.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from voice.pacing import DEFAULT_MARGIN, stall_after, start_delay
from voice.speech import SpeechStream

# How far a chunk's predicted duration may be off, either way. Both ends are checked: a chunk
# shorter than predicted brings the next one's turn sooner (on a fast host the risk), a longer
# one costs more synthesis (on a slow host the risk).
DURATION_UNCERTAINTY = 0.25


@dataclass
class PlaybackReport:
    """What pacing did for one speech."""

    held_seconds: float = 0.0  # time the first sound was held back to avoid a stall
    stalls: int = 0  # times the audio ran dry after the first sound
    stall_seconds: float = 0.0
    stall_chunks: list[int] = field(default_factory=list)  # index of each late chunk


class PacedChunks(Iterator[np.ndarray]):
    """The chunks of ``stream``, the first held back until the rest can keep up.

    ``estimates``: predicted audio seconds (pause included) of each planned chunk, in order;
    ``cost(seconds)``: predicted wall seconds to synthesize that much audio on this host now.
    """

    def __init__(
        self,
        stream: SpeechStream,
        estimates: Sequence[float],
        cost: Callable[[float], float],
        sample_rate: int,
        margin: float = DEFAULT_MARGIN,
        clock: Callable[[], float] = time.perf_counter,
        uncertainty: float = DURATION_UNCERTAINTY,
    ) -> None:
        self.stream, self.estimates, self.cost = stream, list(estimates), cost
        self.sample_rate, self.margin, self.clock = sample_rate, margin, clock
        self.uncertainty = uncertainty
        self.report = PlaybackReport()
        self._buffer: list[np.ndarray] = []
        self._received = 0
        self._ended = False
        self._started = False
        self._playing_until = 0.0

    def __next__(self) -> np.ndarray:
        if not self._started:
            self._fill()
            self._started = True
        if self._buffer:
            return self._hand(self._buffer.pop(0))
        if self._ended:
            raise StopIteration
        chunk = self._take(None)
        if chunk is None:
            raise StopIteration
        self._count_stall(self.clock())
        return self._hand(chunk)

    def close(self) -> None:
        self.stream.close()

    # -- before the first sound ------------------------------------------------------------------
    def _fill(self) -> None:
        """Take chunks until the first may play: the rest predicted ready before it is needed."""
        if self._take(None) is None:
            return
        first_ready = last_arrival = self.clock()
        while not self._ended:
            pending = self.estimates[self._received :]
            if not pending:
                break
            buffered = sum(len(c) for c in self._buffer) / self.sample_rate
            busy = self.clock() - last_arrival
            delay = max(
                start_delay(buffered, [d * scale for d in pending], self.cost, busy, self.margin)
                for scale in (1.0 - self.uncertainty, 1.0 + self.uncertainty)
            )
            if delay <= 0:
                break
            if self._take(delay) is not None:
                last_arrival = self.clock()
        self.report.held_seconds = max(0.0, self.clock() - first_ready)

    def _take(self, timeout: float | None) -> np.ndarray | None:
        """One chunk from the stream into the buffer (None on timeout or at the end)."""
        if self._ended:
            return None
        try:
            chunk = self.stream.poll(timeout)
        except StopIteration:
            self._ended = True
            return None
        if chunk is not None:
            self._received += 1
            if self._started:
                return chunk
            self._buffer.append(chunk)
        return chunk

    # -- after it ----------------------------------------------------------------------------
    def _hand(self, chunk: np.ndarray) -> np.ndarray:
        now = self.clock()
        self._playing_until = max(self._playing_until, now) + len(chunk) / self.sample_rate
        return chunk

    def _count_stall(self, arrived: float) -> None:
        gap = stall_after(self._playing_until, arrived)
        if gap > 0:
            self.report.stalls += 1
            self.report.stall_seconds += gap
            self.report.stall_chunks.append(self._received - 1)
