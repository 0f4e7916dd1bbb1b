"""Issue 4 end to end: transactions with confluent-kafka, kafka-python and aiokafka.

Each test runs against a real ``oncelog serve`` process, once per client, using that client's
transactional producer and its consumers (read_committed and read_uncommitted):

- commit and abort across two topics: read_committed sees exactly the committed records;
- an open transaction holds read_committed readers at the LSO while later non-transactional
  records wait behind it; ListOffsets latest under read_committed is the LSO;
- zombie fencing on send, on commit and on abort;
- a producer process killed mid-transaction is aborted after its transaction.timeout.ms;
- consume-transform-produce with send_offsets_to_transaction.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from txn_clients import (
    TXN_CLIENTS,
    Rec,
    TxnClient,
    TxnProducer,
    poll_until,
    processed_offsets,
    transform,
)

from tests.support.names import unique_group, unique_name, unique_topic

pytestmark = pytest.mark.integration

CLIENT_NAMES = list(TXN_CLIENTS)

# A fast coordinator: timed-out transactions are found within half a second.
BROKER_CONFIGS = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
    "num.partitions": 1,
}
TXN_TIMEOUT_MS = 5000  # long enough to look at the open transaction on a slow machine


@pytest.fixture
def txn_broker(broker_factory):  # type: ignore[no-untyped-def]
    return broker_factory(configs=BROKER_CONFIGS)


@pytest.fixture(params=CLIENT_NAMES)
def client(request: pytest.FixtureRequest, txn_broker) -> Iterator[TxnClient]:  # type: ignore[no-untyped-def]
    c = TXN_CLIENTS[request.param](txn_broker.bootstrap)
    yield c
    c.close()


def by_partition(records: Iterable[Rec]) -> dict[tuple[str, int], list[bytes | None]]:
    out: dict[tuple[str, int], list[bytes | None]] = defaultdict(list)
    for r in records:
        out[(r.topic, r.partition)].append(r.value)
    return dict(out)


def offsets_in_order(records: list[Rec]) -> None:
    last: dict[tuple[str, int], int] = {}
    for r in records:
        key = (r.topic, r.partition)
        assert r.offset > last.get(key, -1), f"{key} delivered out of order: {r.offset}"
        last[key] = r.offset


def send_txn(
    producer: TxnProducer, targets: list[tuple[str, int]], tag: str, n: int
) -> tuple[dict[tuple[str, int], list[bytes | None]], list[Rec]]:
    """Send n records to each target inside the current transaction; wait for the acks."""
    sent: dict[tuple[str, int], list[bytes | None]] = {}
    for topic, partition in targets:
        values: list[bytes | None] = [f"{tag}-{topic[-4:]}-{partition}-{i}".encode()
                                      for i in range(n)]
        for v in values:
            assert v is not None
            producer.send(topic, v, partition=partition)
        sent[(topic, partition)] = values
    acks = producer.flush()
    assert len(acks) == n * len(targets)
    return sent, acks


Placed = dict[tuple[str, int], list[bytes | None]]


def merge(*parts: Placed) -> Placed:
    out: Placed = defaultdict(list)
    for part in parts:
        for key, values in part.items():
            out[key] += values
    return dict(out)


def read_both(client: TxnClient, topics: dict[str, int], expect: dict[str, int], *,
              committed: bool) -> list[Rec]:
    got: list[Rec] = []
    for topic, partitions in topics.items():
        records = client.read(topic, partitions, committed=committed, expect=expect[topic])
        offsets_in_order(records)
        got += records
    return got


# ---------------------------------------------------------------------------------------
def test_commit_and_abort_across_two_topics(client: TxnClient) -> None:
    a, b = unique_topic("txa"), unique_topic("txb")
    client.create_topic(a, 2)
    client.create_topic(b, 1)
    targets = [(a, 0), (a, 1), (b, 0)]

    producer = client.producer(unique_name("tid"))
    producer.init()
    producer.begin()
    first, first_acks = send_txn(producer, targets, "commit1", 3)
    producer.commit()
    producer.begin()
    aborted, _ = send_txn(producer, targets, "abort2", 4)
    producer.abort()
    producer.begin()
    third, third_acks = send_txn(producer, targets, "commit3", 2)
    producer.commit()
    producer.close()

    committed_values = merge(first, third)
    got = read_both(client, {a: 2, b: 1}, {a: 10, b: 5}, committed=True)
    assert by_partition(got) == committed_values
    assert {(r.topic, r.partition, r.offset) for r in got} == {
        (r.topic, r.partition, r.offset) for r in first_acks + third_acks
    }

    everything = read_both(client, {a: 2, b: 1}, {a: 18, b: 9}, committed=False)
    assert by_partition(everything) == merge(first, aborted, third)


# ---------------------------------------------------------------------------------------
def values(records: Iterable[Rec]) -> list[bytes | None]:
    return [r.value for r in records]


def poll_for(consumer, seconds: float) -> list[Rec]:  # type: ignore[no-untyped-def]
    got: list[Rec] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += consumer.poll(1000, 0.2)
    return got


@pytest.mark.parametrize("outcome", ["commit", "abort"])
def test_open_transaction_holds_readers_at_lso(client: TxnClient, outcome: str) -> None:
    topic = unique_topic("lso")
    client.create_topic(topic, 1)
    pre = client.plain_send(topic, 0, [f"pre-{i}".encode() for i in range(3)])
    assert [r.offset for r in pre] == [0, 1, 2]

    # A live read_committed consumer reads what is stable so far, and keeps fetching.
    live = client.group_consumer(topic, unique_group("lso-live"), assign=1)
    try:
        assert values(poll_until(live, 3)) == [b"pre-0", b"pre-1", b"pre-2"]

        producer = client.producer(unique_name("tid"), timeout_ms=60_000)
        producer.init()
        producer.begin()
        txn_values = [f"txn-{i}".encode() for i in range(3)]
        for v in txn_values:
            producer.send(topic, v, partition=0)
        assert [a.offset for a in producer.flush()] == [3, 4, 5]
        post = client.plain_send(topic, 0, [f"post-{i}".encode() for i in range(3)])
        assert [r.offset for r in post] == [6, 7, 8]

        # Everything from the transaction's first offset on waits: the LSO is 3.
        assert client.latest_offsets(topic, 1, committed=True) == {0: 3}
        assert client.latest_offsets(topic, 1, committed=False) == {0: 9}
        assert poll_for(live, 1.0) == []
        fresh = client.read(topic, 1, committed=True, expect=3)
        assert values(fresh) == [b"pre-0", b"pre-1", b"pre-2"]
        assert len(client.read(topic, 1, committed=False, expect=9)) == 9

        if outcome == "commit":
            producer.commit()
            expected = [*txn_values, b"post-0", b"post-1", b"post-2"]
        else:
            producer.abort()
            expected = [b"post-0", b"post-1", b"post-2"]
        producer.close()

        later = poll_until(live, len(expected))
        later += poll_for(live, 0.7)
        assert values(later) == expected
        offsets_in_order(later)
    finally:
        live.close()
    # The marker took offset 9; nothing is unstable any more.
    assert client.latest_offsets(topic, 1, committed=True) == {0: 10}
    assert client.latest_offsets(topic, 1, committed=False) == {0: 10}
    everything = client.read(topic, 1, committed=True, expect=3 + len(expected))
    assert values(everything) == [b"pre-0", b"pre-1", b"pre-2", *expected]


# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["send_added_partition", "send_new_partition", "commit", "abort"])
def test_zombie_is_fenced(client: TxnClient, where: str) -> None:
    topic = unique_topic("zombie")
    client.create_topic(topic, 2)
    tid = unique_name("tid")

    zombie = client.producer(tid)
    zombie.init()
    zombie.begin()
    _, before = send_txn(zombie, [(topic, 0)], "zombie-before", 2)

    successor = client.producer(tid)
    successor.init()  # bumps the epoch: fences the zombie and aborts its open transaction

    # Any exception: which one it is (the client's fenced type) is checked below.
    with pytest.raises(Exception) as failure:
        if where == "send_added_partition":
            # Partition 0 is already in the zombie's transaction: the produce goes straight to
            # the partition, whose producer state must refuse the old epoch.
            for i in range(2):
                zombie.send(topic, f"zombie-after-{i}".encode(), partition=0)
            zombie.flush()
        elif where == "send_new_partition":
            # Partition 1 needs AddPartitionsToTxn first, which the coordinator must refuse.
            for i in range(2):
                zombie.send(topic, f"zombie-after-{i}".encode(), partition=1)
            zombie.flush()
        elif where == "commit":
            zombie.commit()
        else:
            zombie.abort()
    error = failure.value
    if where.startswith("send") and client.is_old_epoch(error):
        # As in Kafka, a partition refuses an old epoch with INVALID_PRODUCER_EPOCH, which a
        # client may hand to the send as it is (Java's clients do) and treat as abortable;
        # its abort then tries to bump the epoch and learns from the coordinator that it is
        # fenced: that is the error the application must see when it tries to go on.
        with pytest.raises(Exception) as failure:
            zombie.abort()
        error = failure.value
    assert client.is_fenced(error), f"not a fenced error: {error!r}"
    zombie.close()

    successor.begin()
    fresh, _ = send_txn(successor, [(topic, 0), (topic, 1)], "successor", 2)
    successor.commit()
    successor.close()

    got = client.read(topic, 2, committed=True, expect=4)
    assert by_partition(got) == fresh
    assert not [r for r in got if r.value and r.value.startswith(b"zombie")]
    # The zombie's acknowledged records are in the log, and aborted.
    raw = client.read(topic, 2, committed=False, expect=4 + len(before))
    assert {(r.partition, r.offset) for r in before} <= {(r.partition, r.offset) for r in raw}


# ---------------------------------------------------------------------------------------
HANG_SCRIPT = Path(__file__).with_name("txn_clients.py")


def test_killed_producer_is_aborted_after_its_timeout(client: TxnClient) -> None:
    topic = unique_topic("hung")
    client.create_topic(topic, 1)
    pre = client.plain_send(topic, 0, [b"pre-0", b"pre-1"])
    tid = unique_name("tid")

    proc = subprocess.Popen(
        [sys.executable, str(HANG_SCRIPT), "hang", client.name, client.bootstrap, tid, topic,
         "0", "3", str(TXN_TIMEOUT_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    try:
        assert proc.stdout is not None
        line = ""
        deadline = time.monotonic() + 60
        while not line.startswith("ACKED") and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
        assert line.startswith("ACKED"), f"hung producer failed: {line}{proc.stdout.read()}"
        acked_at = time.monotonic()
        assert [int(x) for x in line.split()[1:]] == [2, 3, 4]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()

    post = client.plain_send(topic, 0, [b"post-0", b"post-1"])
    assert [r.offset for r in pre + post] == [0, 1, 5, 6]
    # Right after the kill the transaction is still open: readers wait at offset 2.
    assert client.latest_offsets(topic, 1, committed=True) == {0: 2}

    # The coordinator aborts it once transaction.timeout.ms has passed; readers proceed.
    got = client.read(topic, 1, committed=True, expect=4, timeout=TXN_TIMEOUT_MS / 1000 + 15)
    waited = time.monotonic() - acked_at
    assert values(got) == [b"pre-0", b"pre-1", b"post-0", b"post-1"]
    assert [r.offset for r in got] == [0, 1, 5, 6]
    assert waited < TXN_TIMEOUT_MS / 1000 + 10
    assert client.latest_offsets(topic, 1, committed=True) == {0: 8}  # abort marker at 7

    # The timeout fenced the dead instance; a new one starts cleanly and its work is visible.
    successor = client.producer(tid)
    successor.init()
    successor.begin()
    send_txn(successor, [(topic, 0)], "successor", 1)
    successor.commit()
    successor.close()
    final = client.read(topic, 1, committed=True, expect=5)
    assert not [r for r in final if r.value and r.value.startswith(b"hung")]
    assert len(final) == 5


# ---------------------------------------------------------------------------------------
def test_consume_transform_produce(client: TxnClient) -> None:
    src, dst = unique_topic("ctp-in"), unique_topic("ctp-out")
    client.create_topic(src, 2)
    client.create_topic(dst, 2)
    inputs = [f"in-{p}-{i}".encode() for p in range(2) for i in range(10)]
    for p in range(2):
        client.plain_send(src, p, [v for v in inputs if v.startswith(f"in-{p}-".encode())])
    group = unique_group("ctp")
    nothing = {0: None, 1: None}

    consumer = client.group_consumer(src, group)
    producer = client.producer(unique_name("tid"))
    producer.init()
    try:
        # Round 1, committed: a few records.
        first = poll_until(consumer, 1, most=5)
        assert 1 <= len(first) <= 5
        producer.begin()
        transform(producer, dst, first)
        offsets1 = processed_offsets(first)
        producer.send_offsets(offsets1, consumer)
        assert client.committed(group, src, 2) == nothing  # pending until the commit
        producer.commit()
        committed1 = {p: offsets1.get((src, p)) for p in range(2)}
        assert client.committed(group, src, 2) == committed1

        # Round 2, aborted: the rest. Offsets stay where round 1 left them.
        second = poll_until(consumer, len(inputs) - len(first))
        assert len(first) + len(second) == len(inputs)
        producer.begin()
        transform(producer, dst, second)
        producer.send_offsets(processed_offsets(second), consumer)
        producer.abort()
        assert client.committed(group, src, 2) == committed1

        # Round 3: start again from the committed offsets and commit.
        consumer.rewind_to_committed()
        third = poll_until(consumer, len(second))
        assert sorted(values(third)) == sorted(values(second))  # type: ignore[type-var]
        producer.begin()
        transform(producer, dst, third)
        producer.send_offsets(processed_offsets(third), consumer)
        producer.commit()
        assert client.committed(group, src, 2) == {0: 10, 1: 10}
    finally:
        producer.close()
        consumer.close()

    outputs = client.read(dst, 2, committed=True, expect=len(inputs))
    assert sorted(values(outputs)) == sorted(b"out:" + v for v in inputs)  # type: ignore[type-var]
    raw = client.read(dst, 2, committed=False, expect=len(inputs) + len(second))
    assert len(raw) == len(inputs) + len(second)
