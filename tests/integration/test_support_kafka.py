"""The reference Apache Kafka 4.4 broker (tests/support/kafka.py) and the Java harness.

Kafka is started for real (one KRaft node, a JVM, about 3-5 s including the storage
format); the Java harness Probe (kafka-clients 4.4) runs against it and against a real
``oncelog serve``, so later tests can compare the two brokers through the same client.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from txn_clients import ConfluentTxnClient

from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import (
    KAFKA_VERSION,
    XDIST_GROUP,
    KafkaFactory,
    KafkaProcess,
    ReferenceKafkaMissing,
    require_reference,
    run_harness,
)
from tests.support.names import unique_name, unique_topic

# test_java_probe_commits_a_transaction gets Kafka through request.getfixturevalue, which
# the fixture-based grouping in tests/conftest.py cannot see.
pytestmark = pytest.mark.xdist_group(XDIST_GROUP)


def test_kafka_transactions_and_read_committed(kafka_broker: KafkaProcess) -> None:
    assert kafka_broker.ready_line is not None and "Kafka Server started" in kafka_broker.ready_line
    client = ConfluentTxnClient(kafka_broker.bootstrap)
    try:
        topic = unique_topic("kafka-txn")
        client.create_topic(topic, 1)
        producer = client.producer(unique_name("txn"))
        producer.init()
        producer.begin()
        for value in (b"c0", b"c1", b"c2"):
            producer.send(topic, value, partition=0)
        producer.flush()
        producer.commit()
        producer.begin()
        producer.send(topic, b"aborted", partition=0)
        producer.flush()
        producer.abort()
        producer.close()

        committed = client.read(topic, 1, committed=True, expect=3, settle=0.3)
        assert [r.value for r in committed] == [b"c0", b"c1", b"c2"]
        everything = client.read(topic, 1, committed=False, expect=4, settle=0.3)
        assert [r.value for r in everything] == [b"c0", b"c1", b"c2", b"aborted"]
        # Offsets 3 and 5 are the COMMIT and ABORT markers: the LSO is past both.
        assert client.latest_offsets(topic, 1, committed=True) == {0: 6}
    finally:
        client.close()


@pytest.mark.parametrize("fixture", ["kafka_broker", "broker"])
def test_java_probe_commits_a_transaction(fixture: str, request: pytest.FixtureRequest) -> None:
    server: KafkaProcess | BrokerProcess = request.getfixturevalue(fixture)
    client = ConfluentTxnClient(server.bootstrap)
    try:
        topic = unique_topic("probe")
        client.create_topic(topic, 1)
        done = run_harness("Probe", server.bootstrap, topic, "5", unique_name("probe"))
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout.strip().splitlines()[-1])
        assert report == {
            "client": "kafka-clients", "version": KAFKA_VERSION, "topic": topic, "records": 5,
            "partition": 0, "first_offset": 0, "last_offset": 4, "committed": True,
        }
        seen = client.read(topic, 1, committed=True, expect=5, settle=0.3)
        assert [r.value for r in seen] == [f"v{i}".encode() for i in range(5)]
        assert [r.key for r in seen] == [f"k{i}".encode() for i in range(5)]
    finally:
        client.close()


def test_kafka_restart_after_kill_keeps_committed_records(kafka_factory: KafkaFactory) -> None:
    # After a SIGKILL the restarted broker cannot register until the controller expires its
    # previous incarnation's session (broker.session.timeout.ms, 9 s by default): shorten it.
    kafka = kafka_factory(configs={"broker.session.timeout.ms": "1500",
                                   "broker.heartbeat.interval.ms": "300"})
    client = ConfluentTxnClient(kafka.bootstrap)
    topic = unique_topic("restart")
    try:
        client.create_topic(topic, 1)
        producer = client.producer(unique_name("txn"))
        producer.init()
        producer.begin()
        producer.send(topic, b"kept", partition=0)
        producer.flush()
        producer.commit()
        producer.close()
        # EndTxn returns once PREPARE_COMMIT is in the transaction log; Kafka writes the
        # COMMIT marker afterwards. Kill only once it is in the partition (LSO past it).
        deadline = time.monotonic() + 20
        while client.latest_offsets(topic, 1, committed=True) != {0: 2}:
            assert time.monotonic() < deadline, "no COMMIT marker within 20 s"
    finally:
        client.close()
    properties = kafka.properties_path.read_text()
    assert "broker.session.timeout.ms=1500\n" in properties and "node.id=1\n" in properties

    kafka.restart(kill=True)  # SIGKILL, then start on the same, already formatted, log dir
    assert kafka.starts == 2
    assert kafka.log_text().count("===== format:") == 1
    client = ConfluentTxnClient(kafka.bootstrap)
    try:
        seen = client.read(topic, 1, committed=True, expect=1, settle=0.3)
        assert [r.value for r in seen] == [b"kept"]
    finally:
        client.close()
    assert kafka.stop() == 0  # the JVM's 143 after SIGTERM is a clean stop


def test_missing_cache_is_an_error_that_says_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONCELOG_REFERENCE_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ReferenceKafkaMissing, match="make reference"):
        require_reference()


def test_kafka_formats_a_cluster_id_that_begins_with_a_dash(kafka_factory: KafkaFactory) -> None:
    """A random cluster id begins with '-' one time in 64; StorageTool must not take it for
    an option."""
    kafka = kafka_factory(start=False)
    kafka.cluster_id = "-Sx5Q8SySOWp-zztai9tHA"
    kafka.start()
    assert kafka.ready_line is not None
