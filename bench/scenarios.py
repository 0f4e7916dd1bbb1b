"""The scenario registry: what each benchmark run produces and consumes.

A scenario is data; ``bench/workload.py`` interprets it in a producer and a consumer process.
Add one with ``register(Scenario(...))``; ``default=False`` keeps it out of the default set
(ask for it with ``--scenarios NAME`` or ``--scenarios all``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# The same confluent-kafka settings for every broker.
BASE_PRODUCER: Mapping[str, Any] = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1048576,
    "compression.type": "none",
    "enable.idempotence": False,
    # Delivery reports only for failures: errors are counted without a per-record callback.
    "delivery.report.only.error": True,
}
BASE_CONSUMER: Mapping[str, Any] = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    # Tansu answers a new group's JoinGroup after about half the session timeout; keep the
    # join short for both brokers (join time is reported separately from throughput).
    "session.timeout.ms": 6000,
}


@dataclass(frozen=True)
class Scenario:
    name: str
    records: int
    record_size: int
    partitions: int
    producer: Mapping[str, Any] = field(default_factory=dict)
    """Overrides on top of BASE_PRODUCER."""
    consumer: Mapping[str, Any] = field(default_factory=dict)
    """Overrides on top of BASE_CONSUMER."""
    txn_records: int | None = None
    """Transactional producer committing every this many records (None: no transactions)."""
    txn_interval_ms: int | None = None
    """Transactional producer committing every this many milliseconds."""
    small_txns: int | None = None
    """A transaction-rate scenario: this many transactions of ``records`` records each,
    one after the other, each committed before the next begins (no consume phase)."""
    producers: int = 1
    """Transaction-rate scenarios: this many producers at once, each with its own
    transactional id and partition (``partitions`` must be at least this many)."""
    producers_per_process: int = 1
    """Transaction-rate scenarios: producers per worker process, each in its own thread
    (confluent-kafka releases the GIL while it waits), so 32 producers need not be 32
    interpreters on a 2-core machine."""
    client: str = "confluent-kafka"
    """Transaction-rate scenarios: ``confluent-kafka`` or ``oncelog`` (oncelog.client)."""
    two_phase: bool = False
    """Transaction-rate scenarios with oncelog.client: KIP-939 two-phase commit, each
    transaction ended by ``prepare_transaction`` then ``complete_transaction``."""
    ctp_commit_every: int | None = None
    """A consume-transform-produce scenario: the produce phase fills the input topic, then one
    read_committed consumer in a group and a transactional producer turn each input record
    into a derived one, committing (with the consumed offsets) every this many records."""
    broker_configs: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Broker configs per broker name (bench/brokers.py BROKERS), e.g. to enable 2PC."""
    replication_factor: int = 1
    """The topic's; brokers with fewer nodes (bench/brokers.py SIZES) skip the scenario."""
    topic_config: Mapping[str, str] = field(default_factory=dict)
    """Topic configs at creation, e.g. ``min.insync.replicas``."""
    consume: bool = True
    """False: the produce phase only (no consumer run)."""
    default: bool = True
    description: str = ""

    def scaled_records(self, scale: float) -> int:
        if self.small_txns is not None:
            return self.records
        return max(1000, round(self.records * scale))

    def scaled_txns(self, scale: float) -> int:
        return max(100, round((self.small_txns or 0) * scale))

    def worker_partitions(self) -> list[list[int]]:
        """Transaction-rate scenarios: the partitions (one per producer) of each worker
        process, ``producers_per_process`` to a process."""
        step = self.producers_per_process
        return [list(range(first, min(first + step, self.producers)))
                for first in range(0, self.producers, step)]

    @property
    def transactional(self) -> bool:
        return bool(self.txn_records or self.txn_interval_ms or self.small_txns)

    def __post_init__(self) -> None:
        if self.producers > self.partitions and self.small_txns is not None:
            raise ValueError(f"{self.name}: {self.producers} producers on "
                             f"{self.partitions} partitions")
        if self.client not in ("confluent-kafka", "oncelog"):
            raise ValueError(f"{self.name}: unknown client {self.client!r}")
        if self.two_phase and self.client != "oncelog":
            raise ValueError(f"{self.name}: two-phase commit is run with oncelog.client")

    def producer_config(self) -> dict[str, Any]:
        return {**BASE_PRODUCER, **self.producer}

    def consumer_config(self) -> dict[str, Any]:
        return {**BASE_CONSUMER, **self.consumer}


SCENARIOS: dict[str, Scenario] = {}
SELECTIONS: dict[str, tuple[str, ...]] = {}
"""Named sets of scenarios (``--scenarios NAME``), e.g. what an issue's targets need."""


def register(scenario: Scenario) -> Scenario:
    if scenario.name in SCENARIOS:
        raise ValueError(f"scenario {scenario.name!r} registered twice")
    SCENARIOS[scenario.name] = scenario
    return scenario


def select(spec: str | None) -> list[Scenario]:
    """``None``: the default set; ``all``; ``none``; a named selection (SELECTIONS); or
    comma-separated names."""
    if not spec:
        return [s for s in SCENARIOS.values() if s.default]
    if spec == "all":
        return list(SCENARIOS.values())
    if spec == "none":  # e.g. only --request-floor or --client-bench
        return []
    if spec in SELECTIONS:
        return [SCENARIOS[name] for name in SELECTIONS[spec]]
    chosen = []
    for name in (part.strip() for part in spec.split(",")):
        if name not in SCENARIOS:
            known = ", ".join(SCENARIOS)
            raise SystemExit(f"unknown scenario {name!r}; known: {known}")
        chosen.append(SCENARIOS[name])
    return chosen


for _partitions in (1, 4):
    register(Scenario(f"100B-x1M-{_partitions}p", 1_000_000, 100, _partitions))
for _partitions in (1, 4):
    register(Scenario(f"1KiB-x200k-{_partitions}p", 200_000, 1024, _partitions))

register(
    Scenario(
        "100B-x1M-4p-idempotent",
        1_000_000,
        100,
        4,
        producer={"enable.idempotence": True},
        default=False,
        description="idempotent producer",
    )
)
register(
    Scenario(
        "100B-x1M-4p-txn",
        1_000_000,
        100,
        4,
        producer={"enable.idempotence": True},
        txn_records=10_000,
        consumer={"isolation.level": "read_committed"},
        default=False,
        description="transactional producer, a commit every 10k records; read_committed",
    )
)

for _partitions in (1, 4):
    register(
        Scenario(
            f"1KiB-x200k-{_partitions}p-idempotent",
            200_000,
            1024,
            _partitions,
            producer={"enable.idempotence": True},
            default=False,
            description="idempotent producer (compare with the plain 1KiB scenario)",
        )
    )
register(
    Scenario(
        "1KiB-x200k-4p-txn100ms",
        200_000,
        1024,
        4,
        producer={"enable.idempotence": True},
        txn_interval_ms=100,
        consumer={"isolation.level": "read_committed"},
        default=False,
        description="transactional producer committing every 100 ms; read_committed consumer",
    )
)
register(
    Scenario(
        "txn-rate-10x100B-1p",
        10,
        100,
        1,
        producer={"enable.idempotence": True, "linger.ms": 0},
        small_txns=2000,
        default=False,
        description="one producer doing small transactions of 10 x 100 B on 1 partition, "
        "one after the other; transactions/s and commit latency",
    )
)
register(
    Scenario(
        "txn-rate-10x100B-8p-8producers",
        10,
        100,
        8,
        producer={"enable.idempotence": True, "linger.ms": 0},
        small_txns=500,
        producers=8,
        default=False,
        description="8 producer processes at once, each its own transactional id and "
        "partition, each doing 500 small transactions of 10 x 100 B one after the other; "
        "aggregate transactions/s (total over the span from the first start to the last end)",
    )
)

# Replication (issue 14): the same produce on one node, on three nodes with rf=1, and on three
# nodes with rf=3 acks=all min.insync.replicas=2. Six partitions: two led by each of three
# brokers. Produce only (the figure is the cost of replicating the writes).
REPLICATED: Mapping[str, str] = {"min.insync.replicas": "2"}
for _rf, _acks, _what in ((1, "1", "one node, or spread over three"),
                          (3, "all", "min.insync.replicas=2")):
    register(
        Scenario(
            f"1KiB-x200k-6p-rf{_rf}-acks{_acks}",
            200_000,
            1024,
            6,
            producer={"acks": _acks},
            replication_factor=_rf,
            topic_config=REPLICATED if _rf > 1 else {},
            consume=False,
            default=False,
            description=f"replication factor {_rf}, acks={_acks}, produce only ({_what})",
        )
    )
register(
    dataclasses.replace(
        SCENARIOS["txn-rate-10x100B-1p"],
        name="txn-rate-10x100B-1p-rf3",
        replication_factor=3,
        topic_config=REPLICATED,
        description="txn-rate-10x100B-1p on a replication-factor-3 topic "
        "(min.insync.replicas=2; the transaction log is replicated too)",
    )
)

# Issue 18 ("Measure first"): small transactions with 1, 8 and 32 producers, consume-transform-
# produce with read_committed input, and KIP-939 two-phase commit.
register(
    dataclasses.replace(
        SCENARIOS["txn-rate-10x100B-8p-8producers"],
        name="txn-rate-10x100B-32p-32producers",
        partitions=32,
        small_txns=150,
        producers=32,
        producers_per_process=4,
        description="32 producers at once, 4 threads in each of 8 processes, each its own "
        "transactional id and partition, each doing 150 small transactions of 10 x 100 B "
        "one after the other; aggregate transactions/s",
    )
)
register(
    Scenario(
        "ctp-100B-x50k-4p-commit100",
        50_000,
        100,
        4,
        producer={"enable.idempotence": True},
        txn_records=1000,
        ctp_commit_every=100,
        consume=False,
        default=False,
        description="consume-transform-produce: the input (4 partitions) filled by a "
        "transactional producer committing every 1000 records; then one confluent-kafka "
        "read_committed consumer in a group and a transactional producer write one derived "
        "record per input record (value reversed, same partition) to a 4-partition output "
        "topic, with send_offsets_to_transaction and a commit every 100 input records",
    )
)
TWO_PHASE_BROKER_CONFIGS: Mapping[str, Mapping[str, str]] = {
    "oncelog": {"transaction.two.phase.commit.enable": "true"},
    # Kafka 4.4 serves InitProducerId v6 (enable2Pc) only with unstable API versions.
    "kafka": {"transaction.two.phase.commit.enable": "true",
              "unstable.api.versions.enable": "true"},
}
register(
    dataclasses.replace(
        SCENARIOS["txn-rate-10x100B-1p"],
        name="txn-rate-10x100B-1p-oncelog-client",
        small_txns=1000,
        client="oncelog",
        description="txn-rate-10x100B-1p with oncelog.client instead of confluent-kafka "
        "(1000 transactions; the baseline of the 2PC scenario)",
    )
)
register(
    dataclasses.replace(
        SCENARIOS["txn-rate-10x100B-1p-oncelog-client"],
        name="2pc-rate-10x100B-1p",
        producer={"enable.idempotence": True, "linger.ms": 0,
                  "transaction.two.phase.commit.enable": True},
        two_phase=True,
        broker_configs=TWO_PHASE_BROKER_CONFIGS,
        description="KIP-939 two-phase commit with oncelog.client "
        "(transaction.two.phase.commit.enable=true on client and broker): 1000 transactions "
        "of 10 x 100 B, each begin, sends, prepare_transaction, complete_transaction "
        "(commit); the time per transaction is begin to complete",
    )
)
SELECTIONS["issue18"] = (
    "1KiB-x200k-1p",
    "txn-rate-10x100B-1p",
    "txn-rate-10x100B-8p-8producers",
    "txn-rate-10x100B-32p-32producers",
    "ctp-100B-x50k-4p-commit100",
    "txn-rate-10x100B-1p-oncelog-client",
    "2pc-rate-10x100B-1p",
)
