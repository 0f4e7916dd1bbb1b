"""Apache Kafka's Java client (kafka-clients 4.4, oncelog.harness.TxnClient) against a real
``oncelog serve``: the idempotent producer through a fault proxy that loses responses and
cuts connections, transactional commit and abort across partitions seen by a Java
read_committed consumer, consume-transform-produce with KIP-447's group-metadata fencing,
and zombie fencing of a transactional.id."""

from __future__ import annotations

from typing import Any

import pytest
from idem_clients import Outcome, check_exactly_once, make_records, read_log, summary
from java_txn import line_with, need_reference, run_txn_client

from oncelog.client import Admin
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.fault_proxy import ApiKey, FaultRules
from tests.conftest import BrokerFactory
from tests.support.names import unique_name, unique_topic

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("reference")]

# Broker configurations for the transaction tests: the Java client 4.4 uses transactions v2
# (KIP-890 part 2) when the broker finalizes transaction.version >= 2 (oncelog's default),
# v1 otherwise. The second value: whether the Java client must report TV2.
TRANSACTION_VERSIONS: list[Any] = [
    pytest.param({"transaction.version": "1"}, False, id="tv1"),
    pytest.param({"transaction.version": "2"}, True, id="tv2"),
]


@pytest.fixture
def reference() -> None:
    need_reference()


def create_topic(bootstrap: str, partitions: int, **config: str) -> str:
    topic = unique_topic("java")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions, config=config or None)
    return topic


def consume(bootstrap: str, topics: list[str], isolation: str) -> list[tuple[str, int, str]]:
    """(topic, partition, value) of every record a Java consumer reads to the end."""
    lines = run_txn_client("consume", bootstrap, {"topics": topics, "isolation": isolation})
    return [(t, p, v) for t, p, _offset, v in line_with(lines, "records")["records"]]


def test_idempotent_producer_through_lost_acks_and_cut_connections(
    proxied_broker: Any,
) -> None:
    broker: BrokerProcess = proxied_broker.broker
    proxy = proxied_broker.proxy
    partitions = 3
    topic = create_topic(broker.bootstrap, partitions)
    records = make_records(1500, topics=[topic], partitions=partitions)
    proxy.set_rules(FaultRules(drop_rate={ApiKey.PRODUCE: 0.15}, cut_after_bytes=40_000,
                               seed=7))
    spec = {"records": [
        {"i": r.index, "topic": r.topic, "partition": r.partition, "key": r.key.decode(),
         "kseq": r.key_seq, "value": r.value.decode()} for r in records
    ]}
    lines = run_txn_client("idempotent", proxy.bootstrap, spec, timeout=180)
    stats = proxy.stats()
    proxy.set_rules(None)

    errors = [f"record {e['error']}: {e['class']}: {e['message']}" for e in lines if "error" in e]
    acked = {e["ack"]: (e["topic"], e["partition"], e["offset"]) for e in lines if "ack" in e}
    assert not errors, summary(errors)
    assert len(acked) == len(records)
    assert stats.responses_dropped[ApiKey.PRODUCE] >= 2, stats
    assert stats.connections_cut > stats.responses_dropped[ApiKey.PRODUCE], stats

    log = read_log(broker.bootstrap, [topic], partitions)
    outcome = Outcome(acked=acked, errors=errors, sent=len(records), elapsed=0.0)
    report = check_exactly_once(records, outcome, log)
    assert not report.problems(), {k: summary(v) for k, v in report.problems().items()}
    assert sum(len(v) for v in log.values()) == len(records)


@pytest.mark.parametrize(("configs", "tv2"), TRANSACTION_VERSIONS)
def test_transactions_across_partitions_and_read_committed(
    broker_factory: BrokerFactory, configs: dict[str, str], tv2: bool | None
) -> None:
    broker = broker_factory(configs=configs)
    first = create_topic(broker.bootstrap, 2)
    second = create_topic(broker.bootstrap, 1)

    def batch(tag: str) -> list[list[Any]]:
        return [[first, 0, f"{tag}-a"], [first, 1, f"{tag}-b"], [second, 0, f"{tag}-c"]]

    spec = {"transactionalId": unique_name("java-txn"), "transactions": [
        {"records": batch("t0"), "end": "commit"},
        {"records": batch("t1"), "end": "abort"},
        {"records": batch("t2"), "end": "commit"},
        {"records": batch("t3"), "end": "abort"},
    ]}
    lines = run_txn_client("transactions", broker.bootstrap, spec)
    ends = [(line["transaction"], line["end"]) for line in lines if "transaction" in line]
    assert ends == [(0, "commit"), (1, "abort"), (2, "commit"), (3, "abort")]
    if tv2 is not None:
        assert {line["tv2"] for line in lines if "tv2" in line} == {tv2}

    committed = consume(broker.bootstrap, [first, second], "read_committed")
    assert sorted(committed) == sorted(
        [(first, 0, f"{t}-a") for t in ("t0", "t2")]
        + [(first, 1, f"{t}-b") for t in ("t0", "t2")]
        + [(second, 0, f"{t}-c") for t in ("t0", "t2")]
    )
    everything = consume(broker.bootstrap, [first, second], "read_uncommitted")
    assert len(everything) == 12
    # Per partition, read_committed returns the committed records in offset order.
    assert [v for t, p, v in committed if (t, p) == (first, 0)] == ["t0-a", "t2-a"]


def test_consume_transform_produce_fences_a_stale_generation(
    shared_broker: BrokerProcess,
) -> None:
    bootstrap = shared_broker.bootstrap
    source = create_topic(bootstrap, 2)
    sink = create_topic(bootstrap, 2)
    values = [f"v{i}" for i in range(20)]
    run_txn_client("transactions", bootstrap, {
        "transactionalId": unique_name("java-input"),
        "transactions": [{"records": [[source, i % 2, v] for i, v in enumerate(values)],
                          "end": "commit"}],
    })
    lines = run_txn_client("ctp", bootstrap, {
        "input": source, "output": sink, "group": unique_name("java-ctp"),
        "transactionalId": unique_name("java-ctp"),
    })
    a_read = line_with(lines, "a", "read")
    b_read = line_with(lines, "b", "read")
    assert a_read["records"] == len(values)
    assert b_read["records"] == len(values)  # A never committed, so B starts from scratch
    assert b_read["generation"] > a_read["generation"]
    # KIP-447: A's offsets carry its old generation (and a member the group evicted): the
    # group coordinator refuses them, the Java client raises CommitFailedException.
    fenced = line_with(lines, "a", "end")["fenced"]
    assert fenced is not None and fenced.startswith("CommitFailedException"), fenced
    # 10 records and the input transaction's COMMIT marker in each partition.
    assert line_with(lines, "b", "committed")["offsets"] == {f"{source}-0": 11,
                                                             f"{source}-1": 11}

    output = consume(bootstrap, [sink], "read_committed")
    assert sorted(v for _t, _p, v in output) == sorted(v.upper() for v in values)


def test_zombie_producer_is_fenced(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = create_topic(bootstrap, 1)
    lines = run_txn_client("fence", bootstrap, {
        "transactionalId": unique_name("java-zombie"), "topic": topic,
    })
    error = line_with(lines, "first", "commit")["error"]
    assert error == "org.apache.kafka.common.errors.ProducerFencedException"
    assert consume(bootstrap, [topic], "read_committed") == [(topic, 0, "winner")]
    assert [v for _t, _p, v in consume(bootstrap, [topic], "read_uncommitted")] == [
        "zombie", "winner"]
