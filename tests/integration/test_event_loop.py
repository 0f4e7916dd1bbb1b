"""The broker's event loop and connection handling with a real client over TCP: transactions
and read_committed reads on uvloop and on the standard library's loop (``serve
--event-loop``), the default choice, and the idle limit of a plain connection
(``connections.max.idle.ms``, one lazy timer per connection)."""

from __future__ import annotations

import importlib.util
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from rawkafka import RawConnection

from tests.conftest import BrokerFactory
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def _transactions_then_read_committed(bootstrap: str) -> None:
    """Three committed transactions and one aborted one, then a read_committed consumer
    that must see exactly the committed records, in order."""
    topic = unique_topic("loop")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "transactional.id": f"loop-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(30)
    expected = []
    for txn in range(4):
        producer.begin_transaction()
        values = [f"{txn}-{n}".encode() for n in range(10)]
        for value in values:
            producer.produce(topic, value, partition=0)
        if txn == 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            expected += values
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got: list[bytes] = []
        for _ in range(200):
            if len(got) >= len(expected):
                break
            for message in consumer.consume(100, 0.5):
                assert message.error() is None, message.error()
                payload = message.value()
                assert payload is not None
                got.append(payload)
        assert got == expected
    finally:
        consumer.close()


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_transactions_on_each_event_loop(broker_factory: BrokerFactory, loop: str) -> None:
    if loop == "uvloop" and not HAS_UVLOOP:
        pytest.fail("uvloop is a dependency of oncelog and must be installed")
    broker = broker_factory(extra_args=("--event-loop", loop))
    assert f"event loop: {loop}" in broker.log_text()
    _transactions_then_read_committed(broker.bootstrap)


def test_default_event_loop_is_uvloop_when_installed(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    expected = "uvloop" if HAS_UVLOOP else "asyncio"
    assert f"event loop: {expected}" in broker.log_text()


def test_idle_plain_connection_is_closed_and_active_ones_stay(
        broker_factory: BrokerFactory) -> None:
    broker = broker_factory(configs={"connections.max.idle.ms": 1000})
    idle = RawConnection(broker.bootstrap, timeout=30)
    try:
        response = idle.request(ApiVersionsRequest(client_software_name="t",
                                                    client_software_version="1"))
        assert response.error_code == ErrorCode.none
        # Nothing more is sent: the broker closes the connection (the read sees the end).
        assert idle.recv_frame() is None
    finally:
        idle.close()
    assert "closing idle connection from 127.0.0.1" in broker.log_text()
    # Transactions (many requests on each connection) are not cut by the idle limit.
    _transactions_then_read_committed(broker.bootstrap)
