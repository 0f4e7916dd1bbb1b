"""oncelog.client consumer positions against a real ``oncelog serve``: a ``seek`` right after
``assign`` wins over the pending offset reset (Java's SubscriptionState.seek cancels it)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.aio import AIOConsumer
from oncelog.client.types import Message
from tests.support.broker import BrokerProcess
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
        list_offsets = consumer.list_offsets

        async def gated(tps: Sequence[TopicPartition], timestamp: int) -> dict[TopicPartition, int]:
            lookup_started.set()
            await release.wait()
            return await list_offsets(tps, timestamp)

        consumer.list_offsets = gated  # type: ignore[method-assign]
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
