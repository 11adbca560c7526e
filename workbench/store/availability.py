"""Whether a shared database server answers, and failing fast while it does not.

A database server (PostgreSQL) can go away under a running process. Waiting for it would
queue every request behind the store lock, each for the connection pool's timeout (minutes
for the last in line), and a stop would wait behind them. Instead, one state for the store:

* **up**: operations run. When one loses its connection (or finds none in the pool), the
  server is probed once, on a fresh connection with a short timeout: it answers → only that
  connection was gone, the operation fails alone (:class:`StoreError`); it does not → *down*.
* **down**: every operation raises :class:`StoreUnavailable` at once, saying since when and
  why; a background thread probes every ``interval`` seconds and, once the server answers,
  lets the pool drop its broken connections (``on_back``) and sets the state *up* again.

Both errors carry ``retry_after`` (HTTP ``Retry-After``): the probe interval rounded up to a
whole second (1 s at the default 0.5 s), when a retry may find the server back.

``/health`` reads the state (:meth:`Availability.outage`) and never waits for the server. The
probe and the clock are injected, so the rules are tested without a server.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from workbench.errors import StoreError, StoreUnavailable

log = logging.getLogger("workbench.store")

PROBE_SECONDS = 0.5  # between probes while the server is down

Probe = Callable[[], "str | None"]  # None: the server answers; else why not


class Availability:
    """The up/down state of one store's database server (see the module docstring)."""

    def __init__(
        self,
        what: str,
        probe: Probe,
        on_back: Callable[[], None] = lambda: None,
        interval: float = PROBE_SECONDS,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ):
        self.what = what  # the database, as errors name it (its URL without password)
        self._probe = probe
        self._on_back = on_back
        self.interval = interval
        self._now = now
        self._lock = threading.Lock()
        self._down: tuple[datetime, str] | None = None  # since, why
        self._closed = threading.Event()
        self._prober: threading.Thread | None = None

    @property
    def up(self) -> bool:
        return self._down is None

    def check(self) -> None:
        """Raise :class:`StoreUnavailable` at once while the server is known to be down."""
        down = self._down
        if down is not None:
            raise self._unavailable(*down)

    def outage(self) -> dict[str, str] | None:
        """None while up; else since when (ISO time) and why."""
        down = self._down
        if down is None:
            return None
        return {"since": down[0].isoformat(), "detail": down[1]}

    def lost(self, reason: str) -> StoreError:
        """An operation lost its connection (or got none) for ``reason``: the error to raise
        for it. The server is probed once; when it does not answer either, the store is down
        from now on (and probed in the background until it is back)."""
        if self._down is not None:
            return self._unavailable(*self._down)
        why = self._probe()
        if why is None:
            return StoreError(
                f"the connection to {self.what} failed ({reason}); try again",
                retry_after=self.retry_after,
            )
        with self._lock:
            if self._down is None and not self._closed.is_set():
                self._down = (self._now(), why)
                log.error(
                    "%s is unreachable (%s): requests that need it fail at once until it "
                    "is back (probed every %.1f s)",
                    self.what,
                    why,
                    self.interval,
                )
                self._start_prober()
            down = self._down or (self._now(), why)
        return self._unavailable(*down)

    @property
    def retry_after(self) -> int:
        """Whole seconds after which a retry may find the server back (one probe later)."""
        return max(1, math.ceil(self.interval))

    def _unavailable(self, since: datetime, why: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"{self.what} is unreachable since {since.isoformat(timespec='seconds')} ({why}); "
            "requests that need it fail until it is back: try again shortly",
            retry_after=self.retry_after,
        )

    def _start_prober(self) -> None:
        self._prober = threading.Thread(target=self._watch, name="store-probe", daemon=True)
        self._prober.start()

    def _watch(self) -> None:
        """Probe until the server answers (or the store is closed), then set the state up."""
        while not self._closed.wait(self.interval):
            if self._probe() is not None:
                continue
            try:
                self._on_back()
            except Exception:  # noqa: BLE001 - the pool refills on its own as well
                log.warning("refreshing the pool after %s came back failed", self.what)
            with self._lock:
                since = self._down[0] if self._down else self._now()
                self._down = None
            log.warning("%s is back after %.1f s", self.what, (self._now() - since).total_seconds())
            return

    def close(self) -> None:
        """Stop probing (the store is being closed)."""
        self._closed.set()
        prober = self._prober
        if prober is not None and prober is not threading.current_thread():
            prober.join(self.interval + 5)
