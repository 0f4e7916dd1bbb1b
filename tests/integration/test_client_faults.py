"""oncelog.client through a fault-injecting proxy: lost acknowledgements and cut
connections must not lose, duplicate or reorder records (idempotence) or break commits."""

from __future__ import annotations

import time

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.client.errors import KafkaTimeoutError
from oncelog.client.types import Message
from oncelog.harness.fault_proxy import ApiKey, FaultRules
from tests.support.names import unique_name, unique_topic


def make_topic(bootstrap: str, partitions: int = 1) -> str:
    topic = unique_topic("fault")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    return topic


def read_all(bootstrap: str, topic: str, expected: int, partitions: int = 1) -> list[Message]:
    got: list[Message] = []
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            got.extend(consumer.poll(0.3))
        got.extend(consumer.poll(0.5))  # anything extra (duplicates) shows up too
    return got


def test_lost_produce_acks_neither_lose_nor_duplicate(proxied_broker: object) -> None:
    bootstrap = proxied_broker.bootstrap  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = make_topic(bootstrap)
    proxy.set_rules(FaultRules(drop_next={ApiKey.PRODUCE: 3}))
    with Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 2, "retry.backoff.ms": 20}
    ) as producer:
        futures = [producer.send(topic, f"{i:05d}".encode()) for i in range(300)]
        assert producer.flush(60) == 0
        offsets = [f.result().offset for f in futures]
    assert proxy.stats().responses_dropped[ApiKey.PRODUCE] == 3
    assert offsets == list(range(300))
    got = read_all(bootstrap, topic, 300)
    assert [m.value for m in got] == [f"{i:05d}".encode() for i in range(300)]


def test_random_ack_loss_keeps_order_and_exactly_once(proxied_broker: object) -> None:
    bootstrap = proxied_broker.bootstrap  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = make_topic(bootstrap, partitions=2)
    proxy.set_rules(FaultRules(drop_rate={ApiKey.PRODUCE: 0.3}, seed=7))
    with Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 1, "batch.size": 512, "retry.backoff.ms": 10}
    ) as producer:
        for i in range(400):
            producer.send(topic, f"{i:05d}".encode(), key=b"a" if i % 2 else b"b")
        assert producer.flush(90) == 0
    assert proxy.stats().responses_dropped[ApiKey.PRODUCE] > 0
    got = read_all(bootstrap, topic, 400, partitions=2)
    assert len(got) == 400
    for partition in (0, 1):
        mine = [int(m.value or b"") for m in got if m.partition == partition]
        assert mine == sorted(mine)
        assert [m.offset for m in got if m.partition == partition] == list(range(len(mine)))


def test_lost_fetch_responses_do_not_skip_records(proxied_broker: object) -> None:
    bootstrap = proxied_broker.bootstrap  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = make_topic(bootstrap)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for i in range(100):
            producer.send(topic, f"{i:05d}".encode())
        producer.flush(30)
    proxy.set_rules(FaultRules(drop_next={ApiKey.FETCH: 2}))
    got = read_all(bootstrap, topic, 100)
    assert proxy.stats().responses_dropped[ApiKey.FETCH] == 2
    assert [m.offset for m in got] == list(range(100))


def test_commit_survives_a_lost_end_txn_response(proxied_broker: object) -> None:
    bootstrap = proxied_broker.bootstrap  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = make_topic(bootstrap)
    end_txn = 26
    with Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": unique_name("lost-end")}
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, f"t{i}".encode())
        proxy.set_rules(FaultRules(drop_next={end_txn: 1}))
        producer.commit_transaction()
        assert proxy.stats().responses_dropped[end_txn] == 1
        producer.begin_transaction()
        producer.send(topic, b"next")
        producer.commit_transaction()
    got = read_all(bootstrap, topic, 6)
    assert [m.value for m in got] == [b"t0", b"t1", b"t2", b"t3", b"t4", b"next"]


def test_producer_pipelines_batches_of_a_partition_up_to_max_in_flight(
    proxied_broker: object,
) -> None:
    # Produce responses are held back a second: the requests the producer sends meanwhile
    # are its batches in flight. One partition, many full batches: it sends exactly as many
    # as max.in.flight.requests.per.connection allows, then waits, and the records still
    # land once each, in order.
    bootstrap = proxied_broker.bootstrap  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = make_topic(bootstrap)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 2048,
              "max.in.flight.requests.per.connection": 3}  # fmt: skip
    with Producer(config) as producer:
        producer.partitions_for(topic)
        proxy.set_rules(FaultRules(delay={ApiKey.PRODUCE: 1.0}))
        futures = [producer.send(topic, f"{i:05d}".encode() * 100) for i in range(60)]
        stats = proxy.wait_for(
            lambda s: s.requests.get(ApiKey.PRODUCE, 0) - s.responses.get(ApiKey.PRODUCE, 0) >= 3
        )
        assert stats.requests[ApiKey.PRODUCE] - stats.responses.get(ApiKey.PRODUCE, 0) == 3
        assert producer.flush(60) == 0
        assert [f.result().offset for f in futures] == list(range(60))
    got = read_all(bootstrap, topic, 60)
    assert [m.value for m in got] == [f"{i:05d}".encode() * 100 for i in range(60)]


def test_produce_request_without_an_answer_times_out(proxied_broker: object) -> None:
    # Produce responses held back longer than request.timeout.ms: the request fails with a
    # timeout (retries=0 makes that the record's outcome), the connection is closed, and
    # the next record goes out on a new one.
    bootstrap = proxied_broker.bootstrap  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = make_topic(bootstrap)
    config = {"bootstrap.servers": bootstrap, "linger.ms": 0, "retries": 0,
              "request.timeout.ms": 1000, "delivery.timeout.ms": 60_000}  # fmt: skip
    with Producer(config) as producer:
        assert producer.send(topic, b"first").result(60).offset == 0  # connected
        proxy.set_rules(FaultRules(delay={ApiKey.PRODUCE: 30.0}))
        error = producer.send(topic, b"unanswered").exception(60)
        assert isinstance(error, KafkaTimeoutError)
        assert "no response to api 0" in str(error)
        proxy.set_rules(None)
        assert producer.send(topic, b"after").result(60).offset >= 1
