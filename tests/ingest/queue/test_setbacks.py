"""The queue's setbacks that spend no attempt (workbench.ingest.queue.setbacks): stale preparations
are retried a bounded number of times; held messages are released once, in order, and kept
when the store fails again part way."""

from __future__ import annotations

import pytest

from workbench.errors import StoreUnavailable
from workbench.ingest.queue.setbacks import STALE_LIMIT, HeldMessages, StaleCounts


def test_a_preparation_gone_stale_again_and_again_stops_being_free():
    counts = StaleCounts()
    assert all(counts.again(["e1"]) for _ in range(STALE_LIMIT))
    assert not counts.again(["e1"])  # then its failure counts as usual
    assert counts.again(["e1"])  # and the count starts again
    counts.forget("e1")
    assert all(counts.again(["e1", "e2"]) for _ in range(STALE_LIMIT))


def test_held_messages_are_released_once_and_kept_when_the_store_fails_again():
    held = HeldMessages()
    for uuid in ("a", "b", "c"):
        held.add({"episode_uuid": uuid})
    released: list[str] = []

    def flaky(uuid: str) -> None:
        if uuid == "b" and "b!" not in released:
            released.append("b!")
            raise StoreUnavailable("gone again")
        released.append(uuid)

    with pytest.raises(StoreUnavailable):
        held.release(flaky)
    assert held.uuids() == ["b", "c"]
    assert held.release(flaky) == 2
    assert [u for u in released if not u.endswith("!")] == ["a", "b", "c"]
    assert len(held) == 0 and held.release(flaky) == 0
