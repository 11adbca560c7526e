"""The time words of a query (:mod:`workbench.search.timewords`): the labelled development set
in four languages and more, the before/after rules, what is not a time, and the cost."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from workbench.clock import as_utc
from workbench.search.timewords import BEFORE_SPAN, asks_present, read_window

DEV = json.loads((Path(__file__).parents[2] / "data" / "time_questions.json").read_text("utf-8"))
NOW = as_utc(DEV["now"])


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize("case", DEV["questions"], ids=lambda c: c["query"])
def test_the_development_set_is_read_right(case):
    window = read_window(case["query"], NOW)
    if case["window"] is None:
        assert window is None
    else:
        assert window is not None
        assert (window.start, window.end) == (
            day(case["window"]["start"]),
            day(case["window"]["end"]),
        )
        assert window.text and window.text in case["query"]
    assert asks_present(case["query"]) is case["present"]


def test_the_development_set_covers_four_languages_at_least():
    langs = {c["lang"] for c in DEV["questions"] if c["window"]}
    assert {"en", "pt", "ja", "zh"} <= langs


def test_a_window_is_relative_to_now():
    later = NOW + timedelta(days=365)
    assert read_window("last week", later).start == read_window("last week", NOW).start + timedelta(
        days=364
    )


def test_before_and_after_an_anchor():
    christmas = datetime(2023, 12, 25, tzinfo=UTC)
    before = read_window("what did I do before Christmas", NOW)
    assert (before.start, before.end, before.text) == (christmas - BEFORE_SPAN, christmas,
                                                       "before Christmas")  # fmt: skip
    after = read_window("what happened after Christmas", NOW)
    assert (after.start, after.end) == (christmas, NOW)
    since = read_window("since 2022", NOW)
    assert (since.start, since.end) == (datetime(2022, 1, 1, tzinfo=UTC), NOW)


def test_a_month_without_a_year_is_its_latest_not_after_now():
    assert read_window("in June", NOW).start == datetime(2023, 6, 1, tzinfo=UTC)
    assert read_window("in February", NOW).start == datetime(2024, 2, 1, tzinfo=UTC)


def test_a_written_date_is_read_by_dateparser():
    window = read_window("what did we eat on May 3rd 2023", NOW)
    assert (window.start, window.end) == (datetime(2023, 5, 3, tzinfo=UTC),
                                          datetime(2023, 5, 4, tzinfo=UTC))  # fmt: skip
    assert read_window("o que houve em 3 de maio", NOW).start == datetime(2023, 5, 3, tzinfo=UTC)


@pytest.mark.parametrize("query", [
    "How many 5K runs have I done?", "What may I eat?", "a segunda vez que fui", "1.5 liters",
    "What did I say about the march for climate?", "who won the game 24/7",
])  # fmt: skip
def test_words_that_are_not_times(query):
    assert read_window(query, NOW) is None


def test_reading_costs_microseconds_without_a_written_date():
    queries = [c["query"] for c in DEV["questions"]]
    started = time.perf_counter()
    for n in range(20):  # a different now each time: no cache hit
        for query in queries:
            read_window(query, NOW + timedelta(days=n + 1))
    per_query = (time.perf_counter() - started) / (20 * len(queries))
    assert per_query < 0.002  # ~0.05 ms on this machine; generous for a loaded one
