"""The voice server's Prometheus metrics (``GET /metrics``), on ``prometheus_client``.

Names follow the knowledge service's conventions: a ``voice_`` prefix, counters end in
``_total``, durations are in seconds. Each :class:`VoiceMetrics` owns its registry (tests and
several servers in one process do not share counters); counters reset when the server restarts.

=================================  =========  ==============================================
name                               type       what
=================================  =========  ==============================================
voice_notifications_total          counter    notifications by ``outcome``: played, dropped,
                                              failed, expired, duplicate, queue_full
voice_queue_depth                  gauge      notifications waiting to be spoken
voice_first_audio_seconds          histogram  dequeue to first audio handed to the output, by
                                              ``source`` (cache, engine)
voice_queue_wait_seconds           histogram  acceptance to dequeue
voice_synthesis_seconds            histogram  wall time of one engine call (one chunk)
voice_held_seconds                 histogram  time the first sound was held back by pacing
voice_rtf                          gauge      recent real-time factor of this host
voice_cache_requests_total         counter    cache lookups by ``result``: hit, miss, corrupt
voice_cache_bytes                  gauge      bytes in the audio cache folder
voice_stalls_total                 counter    times the audio ran dry mid-speech
voice_stall_seconds_total          counter    silence those stalls inserted
=================================  =========  ==============================================
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OUTCOMES = ("played", "dropped", "failed", "expired", "duplicate", "queue_full")
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
SYNTHESIS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0)
WAIT_BUCKETS = (0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class VoiceMetrics:
    """Every metric family of the voice server and the calls that record them."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.notifications = Counter("voice_notifications", "Notifications by outcome",
                                     ["outcome"], registry=r)  # fmt: skip
        self.queue_depth = Gauge("voice_queue_depth", "Notifications waiting", registry=r)
        self.first_audio = Histogram(
            "voice_first_audio_seconds", "Dequeue to first audio handed to the output",
            ["source"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.queue_wait = Histogram("voice_queue_wait_seconds", "Acceptance to dequeue",
                                    buckets=WAIT_BUCKETS, registry=r)  # fmt: skip
        self.synthesis = Histogram("voice_synthesis_seconds", "Wall time of one engine call",
                                   buckets=SYNTHESIS_BUCKETS, registry=r)  # fmt: skip
        self.held = Histogram("voice_held_seconds", "First sound held back by pacing",
                              buckets=LATENCY_BUCKETS, registry=r)  # fmt: skip
        self.rtf = Gauge("voice_rtf", "Recent real-time factor (synthesis s per audio s)",
                         registry=r)  # fmt: skip
        self.cache = Counter("voice_cache_requests", "Audio cache lookups by result",
                             ["result"], registry=r)  # fmt: skip
        self.cache_bytes = Gauge("voice_cache_bytes", "Bytes in the audio cache", registry=r)
        self.stalls = Counter("voice_stalls", "Times the audio ran dry mid-speech", registry=r)
        self.stall_seconds = Counter("voice_stall_seconds", "Silence inserted by stalls",
                                     registry=r)  # fmt: skip
        for outcome in OUTCOMES:  # every outcome shows from the start, at 0
            self.notifications.labels(outcome)
        for result in ("hit", "miss", "corrupt"):
            self.cache.labels(result)

    def watch(self, depth: Callable[[], float], rtf: Callable[[], float | None],
              cache_bytes: Callable[[], float]) -> None:  # fmt: skip
        """Gauges read when scraped."""
        self.queue_depth.set_function(depth)
        self.rtf.set_function(lambda: rtf() or 0.0)
        self.cache_bytes.set_function(cache_bytes)

    def outcome(self, outcome: str) -> None:
        self.notifications.labels(outcome).inc()

    def stall(self, seconds: float) -> None:
        self.stalls.inc()
        self.stall_seconds.inc(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
