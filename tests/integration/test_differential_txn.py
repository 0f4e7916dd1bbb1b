"""The exactly-once error paths and transaction views, compared live with Apache Kafka 4.4.

Each scenario (a list of steps, tests/support/differential.py) runs against ``oncelog serve``
and against the reference Kafka 4.4 over raw connections; every observation a client can make
(error codes, offsets, LSO and high watermark, aborted transactions, DescribeTransactions /
ListTransactions / DescribeProducers contents) is compared. ``DELIBERATE`` lists the accepted
differences, each explained in docs/compatibility.md ("Deliberate differences"); any other
difference, or a listed one that no longer happens, fails the test. ApiVersions ranges are
compared in test_api_versions_differential.py.

Requests are TV1 versions (InitProducerId v4/v6, AddPartitionsToTxn v3, EndTxn v3, Produce
v8), so both brokers run transactions v1 semantics whatever their transaction.version.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from tests.conftest import BrokerFactory, KafkaFactory
from tests.support.differential import (
    Difference,
    Step,
    compare,
    new_run_id,
    run,
    setup,
    step,
)

pytestmark = pytest.mark.integration
logger = logging.getLogger(__name__)

# (scenario, observation label) -> why; each is in docs/compatibility.md ("Deliberate
# differences"). Kafka 4.4 answers keepPreparedTxn=true with UNSUPPORTED_VERSION (its KIP-939
# recovery is not enabled at the default transaction.version); oncelog serves it.
KEEP_PREPARED = "KIP-939 keepPreparedTxn: served by oncelog, UNSUPPORTED_VERSION in Kafka 4.4"
DELIBERATE: Mapping[tuple[str, str], str] = {
    ("2pc-keep-prepared", "4:init(txn=tx, enable_2pc=True, keep_prepared=True)"): KEEP_PREPARED,
    ("2pc-keep-prepared", "10:init(txn=tx, enable_2pc=False, keep_prepared=True)"):
        KEEP_PREPARED,
    ("2pc-disabled", "3:init(txn=tx, enable_2pc=False, keep_prepared=True)"): KEEP_PREPARED,
}

T = "t"

SCENARIOS: dict[str, list[Step]] = {
    "fenced-epoch": [
        setup("create_topic", topic=T),
        setup("init", txn="tx", name="old"),
        step("init", txn="tx"),
        step("add_partitions", txn="tx", topic=T, producer="old"),
        step("end_txn", txn="tx", commit=True, producer="old"),
        step("add_offsets", txn="tx", group="g", producer="old"),
        step("add_partitions", txn="tx", topic=T),
        step("produce", topic=T, txn="tx", producer="old"),
        step("produce", topic=T, txn="tx"),
        step("end_txn", txn="tx", commit=False, producer="old"),
        step("end_txn", txn="tx", commit=False, epoch_delta=1),
        step("end_txn", txn="tx", commit=False),
        setup("settle", txns=["tx"]),
        step("fetch", topic=T),
        step("describe_producers", topic=T),
    ],
    "invalid-txn-state": [
        setup("create_topic", topic=T),
        setup("init", txn="tx"),
        step("end_txn", txn="tx", commit=True),
        step("end_txn", txn="tx", commit=False),
        step("describe_transactions", txns=["tx"]),
        step("add_offsets", txn="tx", group="g"),
        step("describe_transactions", txns=["tx"]),
        step("end_txn", txn="tx", commit=True),
        setup("settle", txns=["tx"]),
        step("end_txn", txn="tx", commit=True),
        step("end_txn", txn="tx", commit=False),
        step("describe_transactions", txns=["tx"]),
    ],
    "produce-not-added": [
        setup("create_topic", topic=T),
        setup("init", txn="tx"),
        step("produce", topic=T, txn="tx"),
        step("produce", topic=T, txn="tx"),
        step("describe_transactions", txns=["tx"]),
        step("offsets", topic=T),
    ],
    "invalid-producer-id-mapping": [
        setup("create_topic", topic=T),
        setup("init", txn="a"),
        setup("init", txn="b"),
        step("add_partitions", txn="a", topic=T, producer="b"),
        step("add_offsets", txn="a", group="g", producer="b"),
        step("end_txn", txn="a", commit=True, producer="b"),
        step("init", txn="a", as_producer="b"),
        step("produce", topic=T, txn="a", producer="b"),
    ],
    "invalid-transaction-timeout": [
        step("init", txn="zero", timeout_ms=0),
        step("init", txn="huge", timeout_ms=900_001),
        step("init", txn="max", timeout_ms=900_000),
        step("describe_transactions", txns=["max", "zero"]),
    ],
    "idempotent-sequences": [
        setup("create_topic", topic=T),
        setup("init", txn=None, name="p"),
        step("produce", topic=T, producer="p", n=2),
        step("produce", topic=T, producer="p", seq_delta=2),
        step("produce", topic=T, producer="p", seq=0, n=2),
        step("produce", topic=T, producer="p", seq_delta=-1),
        step("produce", topic=T, producer="p", epoch_delta=1),
        step("produce", topic=T, producer="p", epoch_delta=1, seq=0),
        step("produce", topic=T, producer="p"),
        step("describe_producers", topic=T),
        setup("init", txn=None, name="q"),
        step("produce", topic=T, producer="q", seq=5),
        step("produce", topic=T, producer="q", epoch_delta=-1, seq=0),
        step("offsets", topic=T),
    ],
    "commit-abort-views": [
        setup("create_topic", topic=T, partitions=2),
        setup("init", txn="tx"),
        step("list_transactions"),
        step("describe_transactions", txns=["tx", "nope"]),
        step("add_partitions", txn="tx", topic=T),
        step("add_partitions", txn="tx", topic=T, partition=1),
        step("add_partitions", txn="tx", topic=T, partition=7),
        step("produce", topic=T, txn="tx", n=3),
        step("produce", topic=T, n=2),
        step("offsets", topic=T),
        step("fetch", topic=T),
        step("fetch", topic=T, read_committed=False),
        step("describe_transactions", txns=["tx"]),
        step("list_transactions", states=["Ongoing"]),
        step("list_transactions", states=["Bogus"]),
        step("describe_producers", topic=T),
        step("end_txn", txn="tx", commit=True),
        setup("settle", txns=["tx"]),
        step("offsets", topic=T),
        step("offsets", topic=T, partition=1),
        step("describe_transactions", txns=["tx"]),
        step("describe_producers", topic=T),
        step("add_partitions", txn="tx", topic=T),
        step("produce", topic=T, txn="tx", n=2),
        step("offsets", topic=T),
        step("end_txn", txn="tx", commit=False),
        setup("settle", txns=["tx"]),
        step("offsets", topic=T),
        step("fetch", topic=T),
        step("fetch", topic=T, read_committed=False),
        step("describe_transactions", txns=["tx"]),
        step("list_transactions", states=["CompleteAbort"]),
        step("describe_producers", topic=T),
    ],
}

SCENARIOS_2PC: dict[str, list[Step]] = {
    "2pc-keep-prepared": [
        setup("create_topic", topic=T),
        step("init", txn="tx", enable_2pc=True),
        step("add_partitions", txn="tx", topic=T),
        step("produce", topic=T, txn="tx", n=2),
        step("init", txn="tx", enable_2pc=True, keep_prepared=True),
        step("describe_transactions", txns=["tx"]),
        step("offsets", topic=T),
        step("end_txn", txn="tx", commit=True),
        setup("settle", txns=["tx"]),
        step("offsets", topic=T),
        step("init", txn="tx", enable_2pc=False, keep_prepared=True),
        step("init", txn="plain", enable_2pc=False),
    ],
}

SCENARIOS_2PC_OFF: dict[str, list[Step]] = {
    "2pc-disabled": [
        step("init", txn="tx", enable_2pc=True),
        step("init", txn="tx", enable_2pc=False),
        step("describe_transactions", txns=["tx"]),
        step("init", txn="tx", enable_2pc=False, keep_prepared=True),
    ],
}


def run_all(
    scenarios: Mapping[str, Sequence[Step]], ours: str, kafka: str
) -> tuple[int, list[Difference]]:
    compared, differences = 0, []
    for name, steps in scenarios.items():
        run_id = new_run_id()
        a, b = run(ours, steps, run_id), run(kafka, steps, run_id)
        compared += len(a)
        differences += compare(name, a, b)
    return compared, differences


def check(compared: int, differences: list[Difference], scope: Sequence[str]) -> None:
    for d in differences:
        logger.info("difference %s %s: oncelog=%s kafka=%s", d.scenario, d.label, d.oncelog,
                    d.kafka)
    found = {d.key(): d for d in differences}
    expected = {k for k in DELIBERATE if k[0] in scope}
    deliberate = sorted(set(found) & expected)
    print(f"differential {', '.join(scope)}: {compared} observations compared, "
          f"{len(found)} differences ({len(deliberate)} deliberate)")
    new = [found[k] for k in found if k not in DELIBERATE]
    assert new == [], "differences from Kafka 4.4:\n" + "\n".join(
        f"  {d.scenario} {d.label}: oncelog={d.oncelog} kafka={d.kafka}" for d in new)
    gone = sorted(expected - set(found))
    assert gone == [], f"deliberate differences that no longer happen (update the list): {gone}"


def names(scenarios: Mapping[str, Any]) -> list[str]:
    return list(scenarios)


def test_error_paths_and_views_match_kafka(
    broker_factory: BrokerFactory, kafka_factory: KafkaFactory
) -> None:
    ours = broker_factory().bootstrap
    kafka = kafka_factory().bootstrap
    compared, differences = run_all(SCENARIOS, ours, kafka)
    assert compared > 50
    check(compared, differences, names(SCENARIOS))


def test_two_phase_commit_paths_match_kafka(
    broker_factory: BrokerFactory, kafka_factory: KafkaFactory
) -> None:
    on = {"transaction.two.phase.commit.enable": "true"}
    # Kafka 4.4 serves InitProducerId v6 only with unstable.api.versions.enable.
    unstable = {"unstable.api.versions.enable": "true"}
    compared, differences = run_all(
        SCENARIOS_2PC, broker_factory(configs={"transaction.two.phase.commit.enable": True}
                                      ).bootstrap,
        kafka_factory(configs={**on, **unstable}).bootstrap,
    )
    more, more_differences = run_all(
        SCENARIOS_2PC_OFF, broker_factory().bootstrap, kafka_factory(configs=unstable).bootstrap
    )
    check(compared + more, differences + more_differences,
          names({**SCENARIOS_2PC, **SCENARIOS_2PC_OFF}))
