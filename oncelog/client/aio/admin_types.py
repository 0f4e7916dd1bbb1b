"""The asyncio admin client's value types (what its requests take and answer), the helpers
its role modules share, and ``AdminBase`` (the client and the controller lookup) they
extend.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.aio.client import KafkaClient
from oncelog.client.config import ClientConfig
from oncelog.client.errors import KafkaClientError, error_for
from oncelog.client.types import TopicPartition
from oncelog.errors import ErrorCode

FORCE_TERMINATE_TIMEOUT_MS = 1
# What brokers answer as the timeout of a two-phase-commit transaction (KIP-939): it never
# times out.
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1
# WriteTxnMarkers versions this admin sends (v1 is the first flexible one; v2 only adds the
# transaction version, which an ABORT of a hanging transaction does not need).
_WRITE_TXN_MARKERS_VERSIONS = (1, 1)


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. ``replica_assignment`` (partition -> broker ids, the first the
    preferred leader) replaces ``num_partitions`` and ``replication_factor``, which must
    then stay -1, as in Java's NewTopic."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    config: Mapping[str, str] = field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class NewPartitions:
    """Grow a topic to ``total_count`` partitions; ``assignments`` (one list of broker ids
    per new partition) places them, else the brokers choose."""

    total_count: int
    assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    internal: bool
    leaders: Mapping[int, int]  # partition -> leader node id (-1: none)
    replicas: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # partition -> ids
    isr: Mapping[int, tuple[int, ...]] = field(default_factory=dict)  # partition -> in sync

    @property
    def num_partitions(self) -> int:
        return len(self.leaders)


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: Mapping[int, tuple[str, int]]  # node id -> (host, port)
    # Kafka's AclOperation codes the caller may use on the cluster; None when not asked.
    authorized_operations: frozenset[int] | None = None


@dataclass(frozen=True)
class ReplicaInfo:
    size: int  # bytes of the partition's log in this directory
    offset_lag: int  # how far a future replica is behind the current one (0 otherwise)
    is_future: bool  # the destination of a move between directories, still catching up


@dataclass(frozen=True)
class LogDirDescription:
    path: str
    error: KafkaClientError | None
    total_bytes: int  # -1 when the broker does not say
    usable_bytes: int
    replicas: Mapping[TopicPartition, ReplicaInfo]


@dataclass(frozen=True)
class PartitionReassignment:
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int = -1  # the broker that listed it


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int
    partitions: tuple[TopicPartition, ...]
    coordinator_id: int = -1

    @property
    def two_phase_commit(self) -> bool:
        """A KIP-939 two-phase-commit transaction: it never times out."""
        return self.timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS


@dataclass(frozen=True)
class ProducerState:
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def _error_or_none(code: Any, message: str | None, what: str) -> KafkaClientError | None:
    code = ErrorCode(code)
    return None if code == ErrorCode.none else error_for(code, message or what)


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for tp in partitions:
        tp = TopicPartition(*tp)
        out[tp.topic].append(tp.partition)
    return dict(out)


def _operations(bits: int) -> frozenset[int]:
    """The AclOperation codes set in a Kafka authorized-operations bit field."""
    return frozenset(code for code in range(32) if bits >> code & 1)



def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


class AdminBase:
    """The admin client's connections and controller lookup, shared by its role mixins."""

    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        self.config = config if isinstance(config, ClientConfig) else ClientConfig(config)
        self.client = KafkaClient(self.config)

    async def close(self) -> None:
        await self.client.close()

    async def _controller(self) -> int | None:
        await self.client.refresh_metadata()
        controller = self.client.metadata.controller_id
        return controller if controller >= 0 else None

