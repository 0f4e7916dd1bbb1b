"""Payment events and the exactly-once answer, computed without Spark.

An event is JSON ``{"id", "account", "amount_cents", "ts_ms"}`` keyed by its account, so all
of an account's events are in one input partition, in offset order. The pipeline's two
outputs, as the verifier expects them from the *committed* input alone:

- ``balances`` (a ledger): one record per event, keyed by the account,
  ``{"id", "account", "events", "balance_cents"}``: the account's event count and balance
  after that event, in the account's input order. Exactly once means every committed event
  has exactly one record, with the true running balance, and no other event has any.
- ``minute_totals`` (append mode, event-time windows of one minute, watermark
  ``WATERMARK_DELAY_MS`` behind the largest event time): one record per closed window,
  ``{"minute_ms", "events", "total_cents"}``, exactly once each.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "MINUTE_MS",
    "WATERMARK_DELAY_MS",
    "Balance",
    "Event",
    "MinuteTotal",
    "expected_balances",
    "expected_minutes",
]

MINUTE_MS = 60_000
WATERMARK_DELAY_MS = 2 * MINUTE_MS


@dataclass(frozen=True)
class Event:
    id: str
    account: str
    amount_cents: int
    ts_ms: int

    def encode(self) -> bytes:
        return json.dumps(
            {
                "id": self.id,
                "account": self.account,
                "amount_cents": self.amount_cents,
                "ts_ms": self.ts_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def decode(cls, data: bytes) -> Event:
        raw = json.loads(data)
        return cls(str(raw["id"]), str(raw["account"]), int(raw["amount_cents"]), int(raw["ts_ms"]))


@dataclass(frozen=True)
class Balance:
    id: str
    account: str
    events: int
    balance_cents: int

    @classmethod
    def decode(cls, data: bytes) -> Balance:
        raw = json.loads(data)
        return cls(
            str(raw["id"]), str(raw["account"]), int(raw["events"]), int(raw["balance_cents"])
        )


@dataclass(frozen=True)
class MinuteTotal:
    minute_ms: int
    events: int
    total_cents: int

    @classmethod
    def decode(cls, data: bytes) -> MinuteTotal:
        raw = json.loads(data)
        return cls(int(raw["minute_ms"]), int(raw["events"]), int(raw["total_cents"]))


def expected_balances(events: Iterable[Event]) -> dict[str, Balance]:
    """Per event id, its account's balance after it (``events`` in input order)."""
    count: dict[str, int] = defaultdict(int)
    balance: dict[str, int] = defaultdict(int)
    out: dict[str, Balance] = {}
    for event in events:
        count[event.account] += 1
        balance[event.account] += event.amount_cents
        out[event.id] = Balance(
            event.id, event.account, count[event.account], balance[event.account]
        )
    return out


def expected_minutes(events: Iterable[Event]) -> dict[int, MinuteTotal]:
    """The one-minute windows that the final watermark (largest event time minus
    ``WATERMARK_DELAY_MS``) has closed, with their totals."""
    listed = list(events)
    if not listed:
        return {}
    watermark = max(e.ts_ms for e in listed) - WATERMARK_DELAY_MS
    counts: dict[int, int] = defaultdict(int)
    totals: dict[int, int] = defaultdict(int)
    for e in listed:
        minute = e.ts_ms - e.ts_ms % MINUTE_MS
        counts[minute] += 1
        totals[minute] += e.amount_cents
    return {
        minute: MinuteTotal(minute, counts[minute], totals[minute])
        for minute in sorted(counts)
        if minute + MINUTE_MS <= watermark
    }
