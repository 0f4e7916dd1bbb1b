"""Kafka Streams 4.3 with ``processing.guarantee=exactly_once_v2`` against ``oncelog serve``.

The topology (tests/java/streams, ``oncelog.streams.RunningTotals``) reads
``key=account, value=amount``, re-keys by group (a repartition topic Streams creates and
purges with DeleteRecords), sums per group in the state store ``totals`` (a changelog topic
with ``cleanup.policy=compact``) and writes every update as ``key=group,
value="<count>,<sum>"``. The record cache is off, so each input record yields exactly one
output record.

Mid-run the broker is ``kill -9``'d and restarted, and later the Streams JVM is ``kill -9``'d
and started again (its EOS state store is then rebuilt from the changelog). The changelog is
created before Streams starts, compacted with small segments, and the app is killed only
once the log cleaner has cleaned it (issue 16): the restore reads a compacted changelog,
transaction markers and aborted batches removed, offsets with gaps. Afterwards the
output, read read_committed, must be exactly what one failure-free run would give: for each
group the counts 1, 2, ..., n (every input counted once: no gap, no repeat) and the final
sum of that group's amounts. The broker must not have refused any of Streams' requests.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from txn_clients import ConfluentTxnClient

from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import JavaClient
from tests.support.names import unique_name, unique_topic

PARTITIONS = 2
GROUPS = 5
ACCOUNTS = 40
RECORDS = 2000
GATE_TIMEOUT = 300.0  # seconds a gated feeder waits for the test to open the gate

# The broker logs a refused or failed request (a closed connection, a handler error, a
# refused marker, a failed offset commit) at WARNING or ERROR; a clean run logs neither.
PROBLEM = re.compile(r"^\S+ \S+ (WARNING|ERROR) ")
KILL_RECOVERY = "deleting unfinished producer snapshot"

# The state store's changelog, created compacted before Streams starts (Streams accepts an
# existing changelog with the right partition count): small segments and a low dirty ratio
# so the cleaner cleans it within the run (rolled segments are flushed, and so cleanable,
# within a second).
CHANGELOG_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
}
BROKER_CONFIGS = {"log.cleaner.backoff.ms": 200}


def _account(i: int) -> str:
    return f"a{i % ACCOUNTS}"


def _amount(i: int) -> int:
    return i % 97 + 1


def _group(account: str) -> str:
    return f"g{int(account[1:]) % GROUPS}"


def _produce(bootstrap: str, topic: str, numbers: range, *, chunk: int | None = None,
             pause: float = 0.0, gates: Sequence[tuple[int, threading.Event]] = ()) -> None:
    """Produce ``numbers`` idempotently, ``chunk`` records at a time with ``pause`` seconds
    between chunks (pacing: input keeps arriving while the app is killed and restarted).
    Each gate ``(number, event)`` holds the numbers from ``number`` on until ``event`` is set
    (at most ``GATE_TIMEOUT`` s), so input is still to come whatever the machine's speed."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5})
    errors: list[KafkaError] = []

    def on_delivery(err: KafkaError | None, msg: Message[bytes, bytes]) -> None:
        if err is not None:
            errors.append(err)

    step = chunk or len(numbers)
    for start in range(numbers.start, numbers.stop, step):
        for number, event in gates:
            if start >= number:
                event.wait(GATE_TIMEOUT)
        for i in range(start, min(start + step, numbers.stop)):
            producer.produce(topic, key=_account(i).encode(), value=str(_amount(i)).encode(),
                             on_delivery=on_delivery)
        assert producer.flush(30) == 0 and errors == []
        time.sleep(pause)


def _running(app: JavaClient) -> None:
    app.wait_for(lambda lines: {"state": "RUNNING"} in lines, 120, "state RUNNING")


def _purged(bootstrap: str, topic: str) -> int:
    """Records Streams deleted (DeleteRecords) from the start of ``topic``'s partitions."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[0]
                   for p in range(PARTITIONS))
    finally:
        consumer.close()


def _committed_output(client: ConfluentTxnClient, topic: str) -> int:
    """Offsets below the output's LSO, over all partitions (records and markers)."""
    return sum(client.latest_offsets(topic, PARTITIONS, committed=True).values())


def _wait_output(client: ConfluentTxnClient, topic: str, at_least: int, app: JavaClient) -> None:
    app.wait_for(lambda lines: _committed_output(client, topic) >= at_least, 120,
                 f"{at_least} committed output offsets")


def _create_changelog(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1, config=CHANGELOG_CONFIGS)])[
        topic].result(30)


def _cleaned(broker: BrokerProcess, topic: str) -> bool:
    """Whether the cleaner has swapped a cleaned section into every partition of ``topic``
    (its cleaner checkpoint moved past 0)."""
    def checkpoint(p: int) -> int:
        path = broker.data_dir / f"{topic}-{p}" / "cleaner-offset.checkpoint"
        try:
            return int(path.read_text().strip() or 0)
        except FileNotFoundError:
            return 0
    return all(checkpoint(p) > 0 for p in range(PARTITIONS))


def _wait_cleaned(broker: BrokerProcess, topic: str) -> None:
    deadline = time.monotonic() + 30
    while not _cleaned(broker, topic):
        assert time.monotonic() < deadline, f"{topic} not cleaned\n{broker.log_tail(30)}"
        time.sleep(0.1)  # polling interval of a deadline wait, not a synchronisation


def test_streams_exactly_once_v2_survives_broker_and_app_kills(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    broker: BrokerProcess = broker_factory(configs=BROKER_CONFIGS)
    source, sink = unique_topic("streams-in"), unique_topic("streams-out")
    client = ConfluentTxnClient(broker.bootstrap)
    app_args = (broker.bootstrap, unique_name("totals"), source, sink,
                str(tmp_path / "state"), str(GROUPS))
    changelog = f"{app_args[1]}-totals-changelog"
    app: JavaClient | None = None
    broker_killed, app_killed = threading.Event(), threading.Event()
    try:
        client.create_topic(source, PARTITIONS)
        client.create_topic(sink, PARTITIONS)
        _create_changelog(broker.bootstrap, changelog)
        # The input arrives paced (about 10 s), and gated so both kills fall before it is all
        # written however slow the app's start is: at most 2/5 of it before the broker's kill
        # (which waits for 1/5 of the output), at most 7/10 before the app's (1/2).
        feeder = threading.Thread(target=_produce, name="input", kwargs=dict(
            bootstrap=broker.bootstrap, topic=source, numbers=range(RECORDS),
            chunk=RECORDS // 40, pause=0.25,
            gates=[(RECORDS * 2 // 5, broker_killed), (RECORDS * 7 // 10, app_killed)]))
        feeder.start()
        app = JavaClient("oncelog.streams.RunningTotals", *app_args,
                         log_path=tmp_path / "streams.log")
        _running(app)
        _wait_output(client, sink, RECORDS // 5, app)
        assert feeder.is_alive(), "the input was all written before the broker's kill"
        broker.restart(kill=True)
        broker_killed.set()
        _wait_output(client, sink, RECORDS // 2, app)
        assert feeder.is_alive(), "the input was all written before the app's kill"
        app.kill()
        app_killed.set()
        # The restore below must read a compacted changelog.
        _wait_cleaned(broker, changelog)
        errors = [line for line in app.snapshot() if "error" in line]

        app = JavaClient("oncelog.streams.RunningTotals", *app_args,
                         log_path=tmp_path / "streams.log")
        _running(app)
        feeder.join(60)
        assert not feeder.is_alive(), "the input was not all written within 60 s"
        output = client.read(sink, PARTITIONS, committed=True, expect=RECORDS,
                             timeout=120, settle=1.0)
        errors += [line for line in app.snapshot() if "error" in line]
        # Streams purges what it consumed from its repartition topic (repartition.purge.
        # interval.ms is 1 s in RunningTotals) with DeleteRecords.
        repartition = f"{app_args[1]}-by-group-repartition"
        app.wait_for(lambda lines: _purged(broker.bootstrap, repartition) > 0, 60,
                     f"DeleteRecords on {repartition}")
        assert app.stop() == 0, app.log_tail()
    finally:
        broker_killed.set()  # a failed test does not leave the feeder waiting
        app_killed.set()
        if app is not None:
            app.kill()
        client.close()

    counts: dict[str, list[int]] = defaultdict(list)
    sums: dict[str, int] = {}
    for record in sorted(output, key=lambda r: (r.partition, r.offset)):
        assert record.key is not None and record.value is not None
        count, total = map(int, record.value.decode().split(","))
        counts[record.key.decode()].append(count)
        sums[record.key.decode()] = total
    numbers = range(RECORDS)
    expected_counts = Counter(_group(_account(i)) for i in numbers)
    expected_sums: Counter[str] = Counter()
    for i in numbers:
        expected_sums[_group(_account(i))] += _amount(i)
    assert {g: c for g, c in counts.items()} == {
        g: list(range(1, n + 1)) for g, n in expected_counts.items()
    }
    assert sums == dict(expected_sums)
    assert len(output) == RECORDS
    assert errors == [], errors
    # A kill -9 that lands while a producer snapshot is written (one per segment roll) leaves
    # a .tmp that the restarted broker removes with a warning: recovery, not a refusal.
    problems = [line for line in broker.log_text().splitlines()
                if PROBLEM.match(line) and KILL_RECOVERY not in line]
    assert problems == [], problems[:10]
