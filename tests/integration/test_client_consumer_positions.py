"""oncelog.client consumer positions against a real ``oncelog serve``: a ``seek`` right after
``assign`` wins over the pending offset reset (Java's SubscriptionState.seek cancels it), and
a corrupt batch stops ``poll`` with a CorruptRecordError at that batch until the application
seeks past it (Java's CompletedFetch)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.aio import AIOConsumer
from oncelog.client.aio import fetcher as fetcher_module
from oncelog.client.errors import CorruptRecordError, KafkaClientError
from oncelog.client.types import Message
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_topic


def produce_one_batch_each(bootstrap: str, topic: str, count: int) -> None:
    """``count`` records on partition 0, each in a batch of its own (flushed one by one)."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, 1)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), partition=0)
            assert producer.flush(30) == 0


def poll_until(consumer: Consumer, expected: int, timeout: float = 20.0) -> list[Message]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(got) < expected and time.monotonic() < deadline:
        got.extend(consumer.poll(0.5))
    return got


@pytest.mark.parametrize("reset", ["latest", "earliest"])
def test_seek_right_after_assign_is_honoured(shared_broker: BrokerProcess, reset: str) -> None:
    topic = unique_topic(f"seek-assign-{reset}")
    produce_one_batch_each(shared_broker.bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)
    with Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "auto.offset.reset": reset}
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 6)
        got = poll_until(consumer, 4)
        assert [m.offset for m in got] == [6, 7, 8, 9]
        assert [m.value for m in got] == [b"v6", b"v7", b"v8", b"v9"]


@pytest.mark.parametrize("reset", ["latest", "earliest"])
def test_seek_while_the_reset_lookup_is_in_flight_cancels_it(
    shared_broker: BrokerProcess, reset: str
) -> None:
    """Deterministic version of the race: the seek lands while ListOffsets is outstanding."""
    topic = unique_topic(f"seek-race-{reset}")
    produce_one_batch_each(shared_broker.bootstrap, topic, 10)
    tp = TopicPartition(topic, 0)

    async def scenario() -> list[Message]:
        consumer = AIOConsumer(
            {"bootstrap.servers": shared_broker.bootstrap, "auto.offset.reset": reset}
        )
        lookup_started = asyncio.Event()
        release = asyncio.Event()
        list_offsets = consumer.offsets.list_offsets

        async def gated(tps: Sequence[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
            lookup_started.set()
            await release.wait()
            return await list_offsets(tps, timestamp)

        consumer.offsets.list_offsets = gated  # type: ignore[method-assign]
        try:
            await consumer.assign([tp])
            async with asyncio.timeout(20):
                await lookup_started.wait()
            await consumer.seek(tp, 3)
            release.set()
            got: list[Message] = []
            async with asyncio.timeout(20):
                while len(got) < 7:
                    got.extend(await consumer.poll(0.5))
            assert await consumer.position(tp) == 10
            return got
        finally:
            await consumer.close()

    got = asyncio.run(scenario())
    assert [m.offset for m in got] == [3, 4, 5, 6, 7, 8, 9]


def corrupt_batch_on_disk(partition_dir: Path, base_offset: int) -> None:
    """Flip one byte in the middle of the records of the batch at ``base_offset`` (past the
    61-byte header, so inside the CRC-covered part; clean-shutdown recovery does not check
    CRCs, so the broker serves it as it is)."""
    (segment,) = sorted(partition_dir.glob("*.log"))
    data = bytearray(segment.read_bytes())
    pos = 0
    while pos + 12 <= len(data):
        base = int.from_bytes(data[pos : pos + 8], "big", signed=True)
        size = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True) + 12
        if base == base_offset:
            data[pos + 61 + (size - 61) // 2] ^= 0xFF
            segment.write_bytes(bytes(data))
            return
        pos += size
    raise AssertionError(f"no batch at offset {base_offset} in {segment}")


def poll_until_error(consumer: Consumer, timeout: float = 20.0) -> tuple[list[Message], Exception]:
    got: list[Message] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            got.extend(consumer.poll(0.5))
        except CorruptRecordError as exc:
            return got, exc
    raise AssertionError(f"poll raised nothing within {timeout}s; got offsets {got}")


def test_corrupt_batch_raises_from_poll_until_the_application_seeks_past_it(
    broker: BrokerProcess,
) -> None:
    topic = unique_topic("corrupt")
    produce_one_batch_each(broker.bootstrap, topic, 6)
    broker.stop()
    corrupt_batch_on_disk(broker.data_dir / f"{topic}-0", 2)
    broker.start()
    tp = TopicPartition(topic, 0)
    with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([tp])
        got, error = poll_until_error(c)
        assert [m.offset for m in got] == [0, 1]  # what precedes the bad batch arrives first
        assert isinstance(error, CorruptRecordError)
        assert (error.topic, error.partition, error.offset) == (topic, 0, 2)
        assert f"{topic}-0" in str(error) and "offset 2" in str(error)
        # The position stays at the bad batch and the next poll says so again.
        assert c.position(tp) == 2
        with pytest.raises(CorruptRecordError):
            c.poll(1.0)
        c.seek(tp, 3)
        rest = poll_until(c, 3)
        assert [m.offset for m in rest] == [3, 4, 5]
        assert [m.value for m in rest] == [b"v3", b"v4", b"v5"]


def test_unexpected_error_in_the_fetch_task_reaches_poll(
    shared_broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception that is no KafkaClientError must not die with the fetch task (logged as
    "Task exception was never retrieved", poll returning nothing forever)."""
    topic = unique_topic("fetch-bug")
    produce_one_batch_each(shared_broker.bootstrap, topic, 1)

    def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("decoder bug")

    monkeypatch.setattr(fetcher_module, "decode_fetched", broken)
    tp = TopicPartition(topic, 0)
    with Consumer(
        {"bootstrap.servers": shared_broker.bootstrap, "auto.offset.reset": "earliest"}
    ) as consumer:
        consumer.assign([tp])
        deadline = time.monotonic() + 20
        with pytest.raises(KafkaClientError, match=rf"{topic}-0.*RuntimeError: decoder bug"):
            while time.monotonic() < deadline:
                assert consumer.poll(0.5) == []
        monkeypatch.undo()
        # The fetcher keeps going: once decoding works again the record arrives (a failure
        # of a fetch that was already under way may still be reported first).
        got: list[Message] = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            try:
                got = consumer.poll(0.5)
            except KafkaClientError as exc:
                assert "decoder bug" in str(exc)
        assert [m.value for m in got] == [b"v0"]
