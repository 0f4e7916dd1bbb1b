"""The payments example's reference computation and verifier checks (no broker, no Spark)."""

from __future__ import annotations

from examples.payments.model import (
    MINUTE_MS,
    WATERMARK_DELAY_MS,
    Balance,
    Event,
    MinuteTotal,
    expected_balances,
    expected_minutes,
)
from examples.payments.verify import Report, check_balances, check_minutes

EVENTS = [
    Event("e0", "a", 100, 0),
    Event("e1", "b", 50, 10_000),
    Event("e2", "a", -30, 70_000),
    Event("e3", "a", 5, 130_000),
    Event("e4", "b", 1, 70_000 + WATERMARK_DELAY_MS + MINUTE_MS),
]


def test_event_round_trip() -> None:
    assert Event.decode(EVENTS[2].encode()) == EVENTS[2]


def test_running_balances_per_event() -> None:
    expected = expected_balances(EVENTS)
    assert expected["e0"] == Balance("e0", "a", 1, 100)
    assert expected["e2"] == Balance("e2", "a", 2, 70)
    assert expected["e3"] == Balance("e3", "a", 3, 75)
    assert expected["e4"] == Balance("e4", "b", 2, 51)


def test_minutes_closed_by_the_final_watermark() -> None:
    # watermark = 250_000 - 120_000 = 130_000: windows ending at or before it are closed.
    assert expected_minutes(EVENTS) == {
        0: MinuteTotal(0, 2, 150),
        60_000: MinuteTotal(60_000, 1, -30),
    }


def test_verifier_accepts_the_exact_result() -> None:
    report = Report()
    check_balances(EVENTS, list(expected_balances(EVENTS).values()), report)
    check_minutes(EVENTS, list(expected_minutes(EVENTS).values()), report)
    assert report.ok, report


def test_verifier_finds_duplicates_missing_wrong_and_aborted_records() -> None:
    exact = list(expected_balances(EVENTS).values())
    report = Report()
    leaked = Balance("x1-0", "ghost-0", 1, 10_000_000)
    wrong = Balance("e3", "a", 3, 76)
    check_balances(EVENTS, [*exact[:2], exact[1], wrong, leaked], report)
    text = "\n".join(report.problems)
    assert "e1 has more than one record" in text
    assert "expected Balance(id='e3'" in text
    assert "no committed event" in text
    assert "no record for event e4" in text
    minutes = list(expected_minutes(EVENTS).values())
    report = Report()
    check_minutes(EVENTS, [minutes[0], minutes[0], MinuteTotal(120_000, 1, 5)], report)
    text = "\n".join(report.problems)
    assert "written more than once" in text
    assert "unexpected window" in text
    assert "60000" in text and "missing" in text
