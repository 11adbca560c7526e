"""Read timeouts for uvicorn's HTTP/1.1 protocol: a slow client cannot hold a socket forever.

uvicorn closes an idle keep-alive connection (``timeout_keep_alive``) but sets no limit on
how long a client may take to send a request: one that connects and sends nothing, or sends
its headers or body a byte at a time, keeps its socket (and a slot of the server) for as long
as it likes. :func:`timed_protocol` is uvicorn's h11 protocol with two deadlines:

* the request line and headers must arrive within ``header_seconds`` of the connection (or of
  the first byte of the next request on a kept-alive connection); past it, the server answers
  ``408 Request Timeout`` and closes;
* the whole body must arrive within ``body_seconds`` of the headers; past it, the connection
  is closed (the handler reading the body sees the client gone).

Both are counted from the start of their phase, not from the last byte (a client dribbling one
byte a second would otherwise never time out).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("service.timeouts")

TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"connection: close\r\ncontent-length: 33\r\n\r\nthe request took too long to send"
)


class TimedH11Protocol(H11Protocol):
    """:class:`H11Protocol` with the header and body deadlines of the class attributes."""

    header_seconds = 10.0
    body_seconds = 60.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._phase: str | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch(waiting_for_request=True)

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch(waiting_for_request=False)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm(None)  # idle until the next request: uvicorn's keep-alive timeout rules

    def _watch(self, waiting_for_request: bool) -> None:
        """Arm the deadline of the phase the client is in: sending headers or a body."""
        state = self.conn.their_state
        if state is h11.IDLE and (waiting_for_request or self.conn.trailing_data[0]):
            phase = "headers"
        elif state is h11.SEND_BODY:
            phase = "body"
        else:
            phase = None
        if phase != self._phase:
            self._arm(phase)

    def _arm(self, phase: str | None) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._phase = phase
        if phase is not None:
            seconds = self.header_seconds if phase == "headers" else self.body_seconds
            self._deadline = self.loop.call_later(seconds, self._timed_out, phase, seconds)

    def _timed_out(self, phase: str, seconds: float) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info(
            "closing the connection of %s: its request %s took over %g s", client, phase, seconds
        )
        if phase == "headers" and self.conn.our_state is h11.IDLE:
            self.transport.write(TIMEOUT_RESPONSE)
        self.transport.close()


def timed_protocol(header_seconds: float, body_seconds: float) -> type[TimedH11Protocol]:
    """The protocol class to give ``uvicorn.Config(http=...)``."""
    return type(
        "TimedH11Protocol",
        (TimedH11Protocol,),
        {"header_seconds": header_seconds, "body_seconds": body_seconds},
    )
