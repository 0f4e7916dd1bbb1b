"""Prove the pipeline's output is the exactly-once result of its committed input.

    python -m examples.payments.verify --bootstrap localhost:9092

Reads the input and both outputs read_committed with oncelog's own consumer (no Spark),
computes the expected result from the committed input events (``model.py``) and compares:

- balances: every committed event has exactly one record (none twice: no duplicate; none
  absent: nothing missing) with the account's true running balance after it, and no other
  event has one (aborted input never counts);
- minute totals: every window the final watermark closed appears exactly once, with the
  right count and total, and no other window appears.

Exit status 0 when everything matches, 1 otherwise (each problem is printed).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass, field

from examples.payments.model import (
    Balance,
    Event,
    MinuteTotal,
    expected_balances,
    expected_minutes,
)
from oncelog.client import Consumer, TopicPartition
from oncelog.client.types import Message

__all__ = ["Report", "read_topic", "verify"]


@dataclass
class Report:
    input_events: int = 0
    balance_records: int = 0
    minute_records: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (
            f"{self.input_events} committed input events, {self.balance_records} balance "
            f"records, {self.minute_records} minute records: "
        )
        if self.ok:
            return head + "exactly once (no duplicate, nothing missing, nothing aborted)"
        shown = "\n  ".join(self.problems[:30])
        more = f"\n  ... and {len(self.problems) - 30} more" if len(self.problems) > 30 else ""
        return head + f"{len(self.problems)} problems:\n  {shown}{more}"


def read_topic(
    bootstrap: str, topic: str, *, committed: bool = True, timeout: float = 60.0
) -> list[Message]:
    """Every record of ``topic`` up to its current end (the LSO under read_committed), in
    offset order per partition."""
    config = {
        "bootstrap.servers": bootstrap,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    with Consumer(config) as consumer:
        from oncelog.client import Admin

        with Admin({"bootstrap.servers": bootstrap}) as admin:
            count = admin.list_topics().get(topic, 0)
        tps = [TopicPartition(topic, p) for p in range(count)]
        if not tps:
            return []
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        for tp in tps:
            consumer.seek_to_beginning([tp])
        got: list[Message] = []
        deadline = time.monotonic() + timeout
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end in {timeout} s")
            got.extend(m for m in consumer.poll(0.5) if m.offset < ends[m.topic_partition])
    got.sort(key=lambda m: (m.partition, m.offset))
    return got


def check_balances(
    events: list[Event], records: list[Balance], report: Report, *, partial: bool = False
) -> None:
    expected = expected_balances(events)
    seen: dict[str, int] = defaultdict(int)
    for record in records:
        seen[record.id] += 1
        if seen[record.id] == 2:
            report.problems.append(f"balances: event {record.id} has more than one record")
        truth = expected.get(record.id)
        if truth is None:
            report.problems.append(
                f"balances: {record} is for no committed event (aborted input leaked?)"
            )
        elif truth != record:
            report.problems.append(f"balances: got {record}, expected {truth}")
    for event_id in [] if partial else sorted(set(expected) - set(seen)):
        report.problems.append(
            f"balances: no record for event {event_id}: expected {expected[event_id]}"
        )


def check_minutes(
    events: list[Event], records: list[MinuteTotal], report: Report, *, partial: bool = False
) -> None:
    expected = expected_minutes(events)
    counted: dict[int, int] = defaultdict(int)
    for record in records:
        counted[record.minute_ms] += 1
        if counted[record.minute_ms] == 2:
            report.problems.append(f"minutes: window {record.minute_ms} written more than once")
        truth = expected.get(record.minute_ms)
        if truth is None:
            report.problems.append(f"minutes: unexpected window {record}")
        elif truth != record:
            report.problems.append(f"minutes: got {record}, expected {truth}")
    for minute in [] if partial else sorted(set(expected) - set(counted)):
        report.problems.append(f"minutes: window {expected[minute]} missing")


def verify(
    bootstrap: str,
    input_topic: str = "payments",
    balances_topic: str | None = "balances",
    minutes_topic: str | None = "minute-totals",
    *,
    partial: bool = False,
) -> Report:
    """Compare the outputs with the exactly-once result of the committed input; with
    ``partial`` (a run that has not finished), only what is there is checked: no duplicate,
    no wrong value, nothing from aborted input."""
    report = Report()
    events = [Event.decode(m.value or b"") for m in read_topic(bootstrap, input_topic)]
    report.input_events = len(events)
    if balances_topic:
        balances = [Balance.decode(m.value or b"") for m in read_topic(bootstrap, balances_topic)]
        report.balance_records = len(balances)
        check_balances(events, balances, report, partial=partial)
    if minutes_topic:
        minutes = [MinuteTotal.decode(m.value or b"") for m in read_topic(bootstrap, minutes_topic)]
        report.minute_records = len(minutes)
        check_minutes(events, minutes, report, partial=partial)
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--input", default="payments")
    parser.add_argument("--balances-topic", default="balances")
    parser.add_argument("--minutes-topic", default="minute-totals")
    args = parser.parse_args(argv)
    report = verify(args.bootstrap, args.input, args.balances_topic, args.minutes_topic)
    print(report)
    raise SystemExit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
