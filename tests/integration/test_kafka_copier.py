"""Kafka's own exactly-once system-test tools against ``oncelog serve``, with broker bounces.

The shape of Kafka's transactions system test (tests/kafkatest/tests/core/transactions_test.py
in apache/kafka), on one oncelog broker with the tools of kafka-tools 4.3.1:

1. ``VerifiableProducer`` (idempotent, acks=all) seeds the input topic; what it acknowledged
   is the input.
2. One ``TransactionalMessageCopier`` per input partition (``--use-group-metadata``: KIP-447's
   ``sendOffsetsToTransaction(offsets, groupMetadata)``) copies its partition to the same
   partition of the output topic, one transaction per poll, committing the consumed
   offsets in the transaction; it exits 0 once it has copied up to the input's end offset.
3. A read_committed ``VerifiableConsumer`` reads the output while the copy runs; the broker
   is bounced twice meanwhile: ``kill -9`` and restart, then a clean restart.
4. Afterwards a fresh read_committed ``VerifiableConsumer`` reads the whole output.

Every input message is in the output exactly once, in its input partition's order; the
concurrent consumer saw, at every offset it read, what the final read saw there (never an
aborted or uncommitted record), and together every input message. A consumer may be given
an offset twice after a rebalance (at-least-once *delivery* when a commit was lost with the
broker): that is the same record, not a duplicate in the log, so the concurrent consumer is
checked per (partition, offset).
"""

from __future__ import annotations

import re
from pathlib import Path

from txn_clients import ConfluentTxnClient

from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import JavaClient, Json
from tests.support.names import unique_group, unique_name, unique_topic

TOOLS = "org.apache.kafka.tools."
PARTITIONS = 2
MESSAGES = 3000
# Small transactions: about 150 per copier, so that the bounces fall inside the copy.
TRANSACTION_SIZE = 10
# Kafka's system test: the transaction timeout is above the request timeout (a bounced
# broker may hold a Produce response that long) and below the progress timeout.
TRANSACTION_TIMEOUT_MS = 40_000

PROBLEM = re.compile(r"^\S+ \S+ (WARNING|ERROR) ")
Offsets = dict[tuple[int, int], str]  # (partition, offset) -> value


def _properties(path: Path, values: dict[str, str]) -> str:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
    return str(path)


def _records(lines: list[Json], event: str) -> list[Json]:
    return [line for line in lines if line.get("name") == event]


def _seed(bootstrap: str, topic: str, tmp: Path) -> dict[int, list[str]]:
    """Seed ``topic`` as kafkatest's VerifiableProducer(enable_idempotence=True) does; returns
    the acknowledged values per partition, in offset order."""
    config = _properties(tmp / "producer.properties", {
        "enable.idempotence": "true", "acks": "all", "retries": "50",
        "max.in.flight.requests.per.connection": "5",
    })
    producer = JavaClient(TOOLS + "VerifiableProducer", "--topic", topic,
                          "--max-messages", str(MESSAGES), "--repeating-keys", "100",
                          "--bootstrap-server", bootstrap, "--command-config", config,
                          log_path=tmp / "producer.log")
    assert producer.wait(120) == 0, producer.log_tail()
    acked = _records(producer.snapshot(), "producer_send_success")
    assert len(acked) == MESSAGES, producer.log_tail()
    per_partition: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for record in sorted(acked, key=lambda r: (r["partition"], r["offset"])):
        per_partition[record["partition"]].append(record["value"])
    assert all(per_partition.values()), f"a partition got no input: {per_partition.keys()}"
    return per_partition


def _consumer(bootstrap: str, topic: str, tmp: Path, name: str, limit: int) -> JavaClient:
    """A read_committed VerifiableConsumer; it exits after ``limit`` records (-1: never)."""
    config = _properties(tmp / f"{name}.properties", {"isolation.level": "read_committed"})
    return JavaClient(TOOLS + "VerifiableConsumer", "--topic", topic,
                      "--group-id", unique_group(name), "--bootstrap-server", bootstrap,
                      "--command-config", config, "--max-messages", str(limit),
                      "--reset-policy", "earliest", "--verbose",
                      log_path=tmp / f"{name}.log")


def _consumed(consumer: JavaClient) -> Offsets:
    """What a consumer read, by (partition, offset); the same offset read twice must hold
    the same value."""
    seen: Offsets = {}
    for record in _records(consumer.snapshot(), "record_data"):
        where = (record["partition"], record["offset"])
        assert seen.setdefault(where, record["value"]) == record["value"], where
    return seen


def _processed(copier: JavaClient) -> int:
    return max((int(line.get("totalProcessed", 0)) for line in copier.snapshot()), default=0)


def _wait_copied(copiers: list[JavaClient], inputs: dict[int, list[str]],
                 fraction: float) -> None:
    """Wait until each copier has committed ``fraction`` of its input partition."""
    for partition, copier in enumerate(copiers):
        want = int(len(inputs[partition]) * fraction)

        def copied(lines: list[Json], copier: JavaClient = copier, want: int = want) -> bool:
            return _processed(copier) >= want

        copier.wait_for(copied, 120, f"{want} messages copied")


def test_transactional_message_copier_survives_broker_bounces(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    source, sink = unique_topic("copier-in"), unique_topic("copier-out")
    admin = ConfluentTxnClient(broker.bootstrap)
    try:
        admin.create_topic(source, PARTITIONS)
        admin.create_topic(sink, PARTITIONS)
    finally:
        admin.close()
    inputs = _seed(broker.bootstrap, source, tmp_path)

    group = unique_group("copier")
    copiers = [
        JavaClient(TOOLS + "TransactionalMessageCopier", "--broker-list", broker.bootstrap,
                   "--transactional-id", unique_name(f"copier-{partition}"),
                   "--consumer-group", group, "--input-topic", source,
                   "--input-partition", str(partition), "--output-topic", sink,
                   "--transaction-size", str(TRANSACTION_SIZE),
                   "--transaction-timeout", str(TRANSACTION_TIMEOUT_MS),
                   "--use-group-metadata", log_path=tmp_path / f"copier-{partition}.log")
        for partition in range(PARTITIONS)
    ]
    # Unlimited: a record delivered twice (a lost offset commit) must not end it early.
    concurrent = _consumer(broker.bootstrap, sink, tmp_path, "concurrent", -1)

    _wait_copied(copiers, inputs, 0.15)
    assert all(c.returncode is None for c in copiers), "the copy ended before the first bounce"
    broker.restart(kill=True)
    _wait_copied(copiers, inputs, 0.4)
    assert all(c.returncode is None for c in copiers), "the copy ended before the second bounce"
    broker.restart(kill=False)

    for partition, copier in enumerate(copiers):
        assert copier.wait(120) == 0, copier.log_tail()
        assert _processed(copier) == len(inputs[partition]), copier.snapshot()[-3:]
    concurrent.wait_for(lambda lines: len(_consumed(concurrent)) >= MESSAGES, 90,
                        f"{MESSAGES} distinct offsets read concurrently")
    concurrent.kill()

    final = _consumer(broker.bootstrap, sink, tmp_path, "final", MESSAGES)
    assert final.wait(90) == 0, final.log_tail()
    read = _records(final.snapshot(), "record_data")
    output = {p: [r["value"] for r in read if r["partition"] == p] for p in range(PARTITIONS)}
    # Every input message exactly once, in its partition's order.
    assert output == inputs
    assert len(read) == MESSAGES
    # The concurrent consumer saw only what is committed, and all of it.
    committed: Offsets = {(r["partition"], r["offset"]): r["value"] for r in read}
    assert _consumed(concurrent) == committed
    # The broker refused nothing (refusals and failed requests are logged at WARNING/ERROR).
    problems = [line for line in broker.log_text().splitlines() if PROBLEM.match(line)]
    assert problems == [], problems[:10]
