"""The store's up/down state (workbench.store.availability), with an injected probe: a lost
connection on a server that answers fails alone; one that does not answer makes every call fail
at once until a background probe finds the server back."""

from __future__ import annotations

import threading

import pytest

from tests.pg import wait_for
from workbench.errors import StoreError, StoreUnavailable
from workbench.store.availability import Availability


class Server:
    def __init__(self) -> None:
        self.answers = True
        self.probes = 0

    def probe(self) -> str | None:
        self.probes += 1
        return None if self.answers else "connection refused"


def test_a_lost_connection_on_a_live_server_fails_alone():
    server = Server()
    state = Availability("db", server.probe)
    error = state.lost("server closed the connection")
    assert type(error) is StoreError and "try again" in error.message
    assert state.up and state.outage() is None
    state.check()  # no raise


def test_a_server_that_does_not_answer_fails_every_call_at_once_until_it_is_back():
    server = Server()
    server.answers = False
    back = threading.Event()
    state = Availability("postgresql://db", server.probe, back.set, interval=0.02)
    try:
        error = state.lost("server closed the connection")
        assert isinstance(error, StoreUnavailable)
        assert "postgresql://db is unreachable since" in error.message
        assert "connection refused" in error.message
        assert not state.up
        outage = state.outage()
        assert outage["detail"] == "connection refused" and outage["since"]
        with pytest.raises(StoreUnavailable):
            state.check()
        # a second loss meanwhile does not probe again: it is the same outage
        probes = server.probes
        assert isinstance(state.lost("again"), StoreUnavailable)
        server.answers = True
        assert wait_for(lambda: state.up, timeout=5)
        assert back.is_set()  # the pool was told to drop its broken connections first
        assert server.probes > probes
        state.check()
    finally:
        state.close()


def test_closing_stops_the_probes():
    server = Server()
    server.answers = False
    state = Availability("db", server.probe, interval=0.01)
    state.lost("gone")
    state.close()
    probes = server.probes
    threading.Event().wait(0.1)
    assert server.probes == probes and not state.up


def test_only_errors_of_a_lost_connection_make_the_store_probe():
    import psycopg

    from workbench.store.postgres import connection_lost

    assert connection_lost(psycopg.OperationalError("server closed the connection"))
    assert connection_lost(psycopg.errors.AdminShutdown())  # 57P01: the server stops
    assert connection_lost(psycopg.errors.CannotConnectNow())  # 57P03: it is starting
    assert not connection_lost(psycopg.errors.QueryCanceled())  # 57014: a statement timeout
    assert not connection_lost(psycopg.errors.LockNotAvailable())  # 55P03: a lock timeout


@pytest.mark.parametrize("interval, seconds", [(0.5, 1), (1.0, 1), (2.5, 3)])
def test_the_errors_say_to_retry_after_one_probe(interval, seconds):
    server = Server()
    state = Availability("db", server.probe, interval=interval)
    try:
        assert state.lost("reset").retry_after == seconds  # the server answers: try again
        server.answers = False
        down = state.lost("gone")
        assert isinstance(down, StoreUnavailable) and down.retry_after == seconds
        with pytest.raises(StoreUnavailable) as raised:
            state.check()
        assert raised.value.retry_after == seconds
    finally:
        state.close()
