"""The asyncio admin client: topics, transactions, producers.

Transaction operations go to the transaction coordinator of each id (DescribeTransactions,
InitProducerId for force-termination) or to every broker (ListTransactions);
DescribeProducers goes to each partition's leader.

``force_terminate_transaction(id)`` is KIP-939's forceTerminateTransaction: an
InitProducerId for that transactional id *without* KeepPreparedTxn, which aborts whatever is
ongoing (prepared 2PC transactions included) and fences the current producer.
``abort_transaction`` is Java's Admin.abortTransaction for a *hanging* transaction (open on
a partition, unknown to or forgotten by its coordinator): a WriteTxnMarkers request with an
ABORT marker sent to the partition's leader. Brokers accept ABORT markers from clients (as
Kafka does without an authorizer) and refuse COMMIT markers.
"""

from __future__ import annotations

import datetime
import functools
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.aio.admin_groups import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    GroupsAdmin,
    MemberDescription,
    OffsetSpec,
)
from oncelog.client.aio.client import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, KafkaClient
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    KafkaClientError,
    RetriableError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for,
)
from oncelog.client.types import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    TopicPartition,
)
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = [
    "AIOAdmin",
    "ClusterDescription",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "LogDirDescription",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "PartitionReassignment",
    "ProducerState",
    "ReplicaInfo",
    "TopicDescription",
    "TransactionDescription",
    "TransactionListing",
]


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


def _describe_producers_request(by_topic: Mapping[str, list[int]], version: int) -> Any:
    return request(
        api.DESCRIBE_PRODUCERS,
        version,
        topics=tuple(
            nested(
                api.DESCRIBE_PRODUCERS, version, "TopicRequest", name=t, partition_indexes=tuple(ps)
            )
            for t, ps in by_topic.items()
        ),
    )


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


def _config_node(resource: ConfigResource) -> int | None:
    """Where a config resource is served: a broker's own configs by that broker, the rest
    (topics, the cluster-wide broker default) by any broker."""
    if resource.type == ConfigResourceType.BROKER and resource.name.isdigit():
        return int(resource.name)
    return None


def _by_config_node(resources: Iterable[ConfigResource]) -> dict[int | None, list[Any]]:
    out: dict[int | None, list[Any]] = defaultdict(list)
    for resource in resources:
        resource = ConfigResource(ConfigResourceType(resource[0]), str(resource[1]))
        out[_config_node(resource)].append(resource)
    return dict(out)


def _config_entry(entry: Any, version: int) -> ConfigEntry:
    if version == 0:  # before config_source: only "is it the default"
        source = ConfigSource.DEFAULT_CONFIG if entry.is_default else ConfigSource.UNKNOWN
    else:
        source = ConfigSource(int(entry.config_source))
    return ConfigEntry(
        name=entry.name,
        value=entry.value,
        source=source,
        is_read_only=bool(entry.read_only),
        is_sensitive=bool(entry.is_sensitive),
        synonyms=tuple(
            ConfigSynonym(s.name, s.value, ConfigSource(int(s.source)))
            for s in getattr(entry, "synonyms", ())
        ),
        type=ConfigType(int(getattr(entry, "config_type", 0))),
        documentation=getattr(entry, "documentation", None),
    )


def _ms(value: Any) -> int:
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    return int(value)


class AIOAdmin(GroupsAdmin):
    def __init__(self, config: Mapping[str, Any] | ClientConfig) -> None:
        self.config = config if isinstance(config, ClientConfig) else ClientConfig(config)
        self.client = KafkaClient(self.config)

    async def close(self) -> None:
        await self.client.close()

    async def _controller(self) -> int | None:
        await self.client.refresh_metadata()
        controller = self.client.metadata.controller_id
        return controller if controller >= 0 else None

    # ---------------------------------------------------------------- topics

    async def create_topics(
        self, topics: Sequence[NewTopic], *, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaClientError | None]:
        """Create topics; returns each topic's error (None on success)."""
        node = await self._controller()

        def build(version: int) -> Any:
            return request(
                api.CREATE_TOPICS,
                version,
                timeout=timeout_ms,
                validate_only=validate_only,
                topics=tuple(
                    nested(
                        api.CREATE_TOPICS,
                        version,
                        "CreatableTopic",
                        name=t.name,
                        num_partitions=t.num_partitions,
                        replication_factor=t.replication_factor,
                        assignments=tuple(
                            nested(
                                api.CREATE_TOPICS,
                                version,
                                "CreatableReplicaAssignment",
                                partition_index=index,
                                broker_ids=tuple(replicas),
                            )
                            for index, replicas in sorted(t.replica_assignment.items())
                        ),
                        configs=tuple(
                            nested(
                                api.CREATE_TOPICS,
                                version,
                                "CreatableTopicConfig",
                                name=k,
                                value=str(v),
                            )
                            for k, v in t.config.items()
                        ),
                    )
                    for t in topics
                ),
            )

        response = await self.client.call(
            node, api.CREATE_TOPICS, build, timeout_ms=timeout_ms + self.client.request_timeout_ms
        )
        out: dict[str, KafkaClientError | None] = {}
        for result in response.topics:
            code = ErrorCode(result.error_code)
            out[result.name] = (
                None
                if code == ErrorCode.none
                else error_for(code, getattr(result, "error_message", None) or result.name)
            )
        return out

    async def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 30000
    ) -> dict[str, KafkaClientError | None]:
        node = await self._controller()

        def build(version: int) -> Any:
            if version >= 6:
                return request(
                    api.DELETE_TOPICS,
                    version,
                    timeout=timeout_ms,
                    topics=tuple(
                        nested(
                            api.DELETE_TOPICS, version, "DeleteTopicState", name=n, topic_id=None
                        )
                        for n in names
                    ),
                )
            return request(api.DELETE_TOPICS, version, timeout=timeout_ms, topic_names=tuple(names))

        response = await self.client.call(
            node, api.DELETE_TOPICS, build, timeout_ms=timeout_ms + self.client.request_timeout_ms
        )
        out: dict[str, KafkaClientError | None] = {}
        for result in response.responses:
            code = ErrorCode(result.error_code)
            out[str(result.name)] = (
                None
                if code == ErrorCode.none
                else error_for(code, getattr(result, "error_message", None) or str(result.name))
            )
        return out

    async def list_topics(self, *, internal: bool = False) -> dict[str, int]:
        """Topic name -> partition count (internal topics only when asked)."""
        meta = await self.client.refresh_metadata(all_topics=True)
        return {
            name: info.num_partitions
            for name, info in meta.topics.items()
            if info.error == ErrorCode.none and (internal or not info.internal)
        }

    async def describe_topics(
        self, names: Iterable[str] | None = None
    ) -> dict[str, TopicDescription]:
        """Partitions and leaders of ``names`` (None: every topic, internal ones included).
        A topic that does not exist raises UnknownTopicOrPartitionError."""
        wanted = None if names is None else list(names)
        # A full listing: a metadata request naming a topic may create it.
        meta = await self.client.refresh_metadata(all_topics=True)
        out: dict[str, TopicDescription] = {}
        for name in wanted if wanted is not None else sorted(meta.topics):
            info = meta.topics.get(name)
            if info is None:
                raise UnknownTopicOrPartitionError(f"topic {name} does not exist")
            if info.error != ErrorCode.none:
                raise error_for(info.error, f"topic {name}")
            out[name] = TopicDescription(name, info.internal, dict(sorted(info.leaders.items())))
        return out

    async def describe_cluster(
        self, *, include_authorized_operations: bool = False
    ) -> ClusterDescription:
        """Cluster id, controller and brokers with DescribeCluster (KIP-700); from a
        metadata request when the broker does not offer it."""
        conn = await self.client.any_connection()
        if not conn.supports(api.DESCRIBE_CLUSTER):
            meta = await self.client.refresh_metadata()
            return ClusterDescription(meta.cluster_id, meta.controller_id, dict(meta.brokers))
        response = await conn.send(
            request(
                api.DESCRIBE_CLUSTER,
                conn.version(api.DESCRIBE_CLUSTER),
                include_cluster_authorized_operations=include_authorized_operations,
                include_fenced_brokers=False,
            )
        )
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, response.error_message or "DescribeCluster")
        operations = int(response.cluster_authorized_operations)
        return ClusterDescription(
            response.cluster_id,
            int(response.controller_id),
            {int(b.broker_id): (b.host, int(b.port)) for b in response.brokers},
            _operations(operations) if include_authorized_operations else None,
        )

    async def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        *,
        timeout_ms: int = 30000,
        validate_only: bool = False,
    ) -> dict[str, KafkaClientError | None]:
        """Grow topics (CreatePartitions to the controller); each topic's error or None."""
        node = await self._controller()

        def build(version: int) -> Any:
            return request(
                api.CREATE_PARTITIONS,
                version,
                timeout=timeout_ms,
                validate_only=validate_only,
                topics=tuple(
                    nested(
                        api.CREATE_PARTITIONS,
                        version,
                        "CreatePartitionsTopic",
                        name=name,
                        count=spec.total_count,
                        assignments=None
                        if spec.assignments is None
                        else tuple(
                            nested(
                                api.CREATE_PARTITIONS,
                                version,
                                "CreatePartitionsAssignment",
                                broker_ids=tuple(replicas),
                            )
                            for replicas in spec.assignments
                        ),
                    )
                    for name, spec in new_partitions.items()
                ),
            )

        response = await self.client.call(
            node,
            api.CREATE_PARTITIONS,
            build,
            timeout_ms=timeout_ms + self.client.request_timeout_ms,
        )
        return {
            str(r.name): _error_or_none(r.error_code, r.error_message, str(r.name))
            for r in response.results
        }

    async def elect_leaders(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        election_type: str = "preferred",
        timeout_ms: int = 30000,
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Elect the preferred (or, with ``election_type="unclean"``, any) leader of
        ``partitions`` (None: every partition). Each partition's error or None; as in
        Java's Admin, a partition already led by its preferred replica answers
        ELECTION_NOT_NEEDED, and with None those are left out."""
        kinds = {"preferred": 0, "unclean": 1}
        if election_type not in kinds:
            raise ValueError(f"election_type must be one of {sorted(kinds)}")
        node = await self._controller()
        wanted = None if partitions is None else _by_topic(partitions)

        def build(version: int) -> Any:
            return request(
                api.ELECT_LEADERS,
                version,
                election_type=kinds[election_type],
                timeout=timeout_ms,
                topic_partitions=None
                if wanted is None
                else tuple(
                    nested(api.ELECT_LEADERS, version, "TopicPartitions", topic=t,
                           partitions=tuple(ps))
                    for t, ps in wanted.items()
                ),
            )

        response = await self.client.call(
            node, api.ELECT_LEADERS, build, timeout_ms=timeout_ms + self.client.request_timeout_ms
        )
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, "ElectLeaders")
        return {
            TopicPartition(r.topic, int(p.partition_id)): _error_or_none(
                p.error_code, p.error_message, f"{r.topic}-{p.partition_id}"
            )
            for r in response.replica_election_results
            for p in r.partition_result
        }

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``, None: all)."""
        node = await self._controller()
        wanted = None if partitions is None else _by_topic(partitions)

        def build(version: int) -> Any:
            return request(
                api.LIST_PARTITION_REASSIGNMENTS,
                version,
                timeout=timeout_ms,
                topics=None
                if wanted is None
                else tuple(
                    nested(api.LIST_PARTITION_REASSIGNMENTS, version,
                           "ListPartitionReassignmentsTopics", name=t,
                           partition_indexes=tuple(ps))
                    for t, ps in wanted.items()
                ),
            )

        response = await self.client.call(node, api.LIST_PARTITION_REASSIGNMENTS, build)
        if response.error_code != ErrorCode.none:
            raise error_for(
                response.error_code, response.error_message or "ListPartitionReassignments"
            )
        return {
            TopicPartition(t.name, int(p.partition_index)): PartitionReassignment(
                tuple(int(r) for r in p.replicas),
                tuple(int(r) for r in p.adding_replicas),
                tuple(int(r) for r in p.removing_replicas),
            )
            for t in response.topics
            for p in t.partitions
        }

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int = 30000,
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Move partitions to the given replicas (None cancels a reassignment in
        progress); each partition's error or None."""
        node = await self._controller()
        by_topic: dict[str, list[tuple[int, Sequence[int] | None]]] = defaultdict(list)
        for tp, replicas in reassignments.items():
            tp = TopicPartition(*tp)
            by_topic[tp.topic].append((tp.partition, replicas))

        def build(version: int) -> Any:
            return request(
                api.ALTER_PARTITION_REASSIGNMENTS,
                version,
                timeout=timeout_ms,
                allow_replication_factor_change=True,
                topics=tuple(
                    nested(
                        api.ALTER_PARTITION_REASSIGNMENTS,
                        version,
                        "ReassignableTopic",
                        name=topic,
                        partitions=tuple(
                            nested(
                                api.ALTER_PARTITION_REASSIGNMENTS,
                                version,
                                "ReassignablePartition",
                                partition_index=index,
                                replicas=None if replicas is None else tuple(replicas),
                            )
                            for index, replicas in entries
                        ),
                    )
                    for topic, entries in by_topic.items()
                ),
            )

        response = await self.client.call(
            node,
            api.ALTER_PARTITION_REASSIGNMENTS,
            build,
            timeout_ms=timeout_ms + self.client.request_timeout_ms,
        )
        if response.error_code != ErrorCode.none:
            raise error_for(
                response.error_code, response.error_message or "AlterPartitionReassignments"
            )
        return {
            TopicPartition(t.name, int(p.partition_index)): _error_or_none(
                p.error_code, p.error_message, f"{t.name}-{p.partition_index}"
            )
            for t in response.responses
            for p in t.partitions
        }

    async def describe_log_dirs(
        self, brokers: Iterable[int] | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Each broker's log directories (None: every broker) with their partitions'
        sizes (DescribeLogDirs to each broker)."""
        await self.client.refresh_metadata()
        nodes = sorted(self.client.metadata.brokers) if brokers is None else list(brokers)
        out: dict[int, dict[str, LogDirDescription]] = {}
        for node in nodes:
            response = await self.client.call(
                node, api.DESCRIBE_LOG_DIRS, lambda v: request(api.DESCRIBE_LOG_DIRS, v,
                                                               topics=None)
            )
            code = ErrorCode(getattr(response, "error_code", ErrorCode.none))
            if code != ErrorCode.none:
                raise error_for(code, f"DescribeLogDirs on broker {node}")
            out[node] = {
                r.log_dir: LogDirDescription(
                    path=r.log_dir,
                    error=_error_or_none(r.error_code, None, r.log_dir),
                    total_bytes=int(getattr(r, "total_bytes", -1)),
                    usable_bytes=int(getattr(r, "usable_bytes", -1)),
                    replicas={
                        TopicPartition(t.name, int(p.partition_index)): ReplicaInfo(
                            int(p.partition_size), int(p.offset_lag), bool(p.is_future_key)
                        )
                        for t in r.topics
                        for p in t.partitions
                    },
                )
                for r in response.results
            }
        return out

    # ---------------------------------------------------------------- transactions

    async def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_filter_ms: int = -1,
    ) -> list[TransactionListing]:
        await self.client.refresh_metadata()
        out: list[TransactionListing] = []
        for node in sorted(self.client.metadata.brokers):
            response = await self.client.call(
                node,
                api.LIST_TRANSACTIONS,
                lambda v: request(
                    api.LIST_TRANSACTIONS,
                    v,
                    state_filters=tuple(states),
                    producer_id_filters=tuple(producer_ids),
                    duration_filter=duration_filter_ms,
                ),
            )
            if response.error_code != ErrorCode.none:
                raise error_for(response.error_code, f"ListTransactions on broker {node}")
            out.extend(
                TransactionListing(
                    t.transactional_id, int(t.producer_id), t.transaction_state, node
                )
                for t in response.transaction_states
            )
        return out

    async def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        out: dict[str, TransactionDescription] = {}
        for txn_id in transactional_ids:

            async def attempt(txn_id: str = txn_id) -> TransactionDescription:
                node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, txn_id)
                try:
                    response = await self.client.call(
                        node,
                        api.DESCRIBE_TRANSACTIONS,
                        lambda v: request(
                            api.DESCRIBE_TRANSACTIONS, v, transactional_ids=(txn_id,)
                        ),
                    )
                except RetriableError:
                    self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, txn_id)
                    raise
                state = response.transaction_states[0]
                code = ErrorCode(state.error_code)
                if code != ErrorCode.none:
                    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                        self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, txn_id)
                    raise error_for(code, f"DescribeTransactions {txn_id}")
                return TransactionDescription(
                    transactional_id=state.transactional_id,
                    state=state.transaction_state,
                    producer_id=int(state.producer_id),
                    producer_epoch=int(state.producer_epoch),
                    timeout_ms=_ms(state.transaction_timeout),
                    start_time_ms=_ms(state.transaction_start_time)
                    if state.transaction_start_time is not None
                    else -1,
                    partitions=tuple(
                        TopicPartition(t.topic, int(p)) for t in state.topics for p in t.partitions
                    ),
                    coordinator_id=node,
                )

            out[txn_id] = await self.client.retrying(attempt, what=f"DescribeTransactions {txn_id}")
        return out

    async def describe_producers(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, list[ProducerState]]:
        tps = [TopicPartition(*tp) for tp in partitions]
        by_leader: dict[int, list[TopicPartition]] = defaultdict(list)
        for tp in tps:
            await self.client.topic_info(tp.topic)
            by_leader[self.client.leader_for(tp.topic, tp.partition)].append(tp)
        out: dict[TopicPartition, list[ProducerState]] = {}
        for leader, items in by_leader.items():
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in items:
                by_topic[tp.topic].append(tp.partition)
            response = await self.client.call(
                leader,
                api.DESCRIBE_PRODUCERS,
                functools.partial(_describe_producers_request, dict(by_topic)),
            )
            for topic in response.topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    if code != ErrorCode.none:
                        raise error_for(
                            code, f"DescribeProducers {topic.name}-{part.partition_index}"
                        )
                    out[TopicPartition(topic.name, int(part.partition_index))] = [
                        ProducerState(
                            int(p.producer_id),
                            int(p.producer_epoch),
                            int(p.last_sequence),
                            int(p.last_timestamp),
                            int(p.coordinator_epoch),
                            int(p.current_txn_start_offset),
                        )
                        for p in part.active_producers
                    ]
        return out

    async def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int]:
        """Delete the records below each partition's offset (-1: up to the high watermark)
        with DeleteRecords to each leader; the new low watermark of each partition. A
        partition's error is raised (OFFSET_OUT_OF_RANGE, POLICY_VIOLATION, ...)."""
        by_leader: dict[int, dict[str, list[tuple[int, int]]]] = defaultdict(
            lambda: defaultdict(list)
        )
        for tp, offset in offsets.items():
            tp = TopicPartition(*tp)
            await self.client.topic_info(tp.topic)
            by_leader[self.client.leader_for(tp.topic, tp.partition)][tp.topic].append(
                (tp.partition, int(offset))
            )
        out: dict[TopicPartition, int] = {}
        for leader, by_topic in by_leader.items():

            def build(version: int, by_topic: Mapping[str, list[tuple[int, int]]] = by_topic
                      ) -> Any:
                return request(
                    api.DELETE_RECORDS,
                    version,
                    timeout=timeout_ms,
                    topics=tuple(
                        nested(api.DELETE_RECORDS, version, "DeleteRecordsTopic", name=name,
                               partitions=tuple(
                                   nested(api.DELETE_RECORDS, version, "DeleteRecordsPartition",
                                          partition_index=p, offset=o)
                                   for p, o in parts))
                        for name, parts in by_topic.items()
                    ),
                )

            response = await self.client.call(
                leader, api.DELETE_RECORDS, build,
                timeout_ms=timeout_ms + self.client.request_timeout_ms,
            )
            for topic in response.topics:
                for part in topic.partitions:
                    code = ErrorCode(part.error_code)
                    where = f"DeleteRecords {topic.name}-{part.partition_index}"
                    if code != ErrorCode.none:
                        raise error_for(code, where)
                    out[TopicPartition(topic.name, int(part.partition_index))] = int(
                        part.low_watermark
                    )
        return out

    async def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Delete a group's committed offsets of ``partitions`` (OffsetDelete, KIP-496) at
        the group's coordinator. A group-level error (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP)
        is raised; partition errors (GROUP_SUBSCRIBED_TO_TOPIC, ...) are answered."""
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in partitions:
            by_topic[tp[0]].append(int(tp[1]))

        def build(version: int) -> Any:
            return request(
                api.OFFSET_DELETE,
                version,
                group_id=group_id,
                topics=tuple(
                    nested(api.OFFSET_DELETE, version, "OffsetDeleteRequestTopic", name=name,
                           partitions=tuple(
                               nested(api.OFFSET_DELETE, version, "OffsetDeleteRequestPartition",
                                      partition_index=p)
                               for p in parts))
                    for name, parts in by_topic.items()
                ),
            )

        async def attempt() -> Any:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group_id)
            response = await self.client.call(node, api.OFFSET_DELETE, build)
            code = ErrorCode(response.error_code)
            if code != ErrorCode.none:
                raise error_for(code, f"OffsetDelete of group {group_id}")
            return response

        response = await self.client.retrying(attempt, what=f"OffsetDelete {group_id}")
        out: dict[TopicPartition, KafkaClientError | None] = {}
        for topic in response.topics:
            for part in topic.partitions:
                code = ErrorCode(part.error_code)
                out[TopicPartition(topic.name, int(part.partition_index))] = (
                    None if code == ErrorCode.none
                    else error_for(code, f"OffsetDelete {topic.name}-{part.partition_index}")
                )
        return out

    # ---------------------------------------------------------------- configs

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource (DescribeConfigs): name -> entry. A resource's
        error (an unknown topic, another broker's id...) is raised."""
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for node, items in _by_config_node(resources).items():

            def build(version: int, items: list[ConfigResource] = items) -> Any:
                return request(
                    api.DESCRIBE_CONFIGS,
                    version,
                    include_synonyms=include_synonyms,
                    include_documentation=include_documentation,
                    resources=tuple(
                        nested(api.DESCRIBE_CONFIGS, version, "DescribeConfigsResource",
                               resource_type=r.type, resource_name=r.name,
                               configuration_keys=None)
                        for r in items
                    ),
                )

            response = await self.client.call(node, api.DESCRIBE_CONFIGS, build)
            version = int(response.__version__)
            for result in response.results:
                resource = ConfigResource(
                    ConfigResourceType(int(result.resource_type)), result.resource_name
                )
                code = ErrorCode(result.error_code)
                if code != ErrorCode.none:
                    raise error_for(
                        code, result.error_message or f"DescribeConfigs {resource.name!r}"
                    )
                out[resource] = {
                    c.name: _config_entry(c, version) for c in result.configs
                }
        return out

    async def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Replace each resource's whole set of overrides (the legacy AlterConfigs: a
        config left out goes back to its default); each resource's error or None."""

        def entry(version: int, name: str, value: str) -> Any:
            return nested(api.ALTER_CONFIGS, version, "AlterableConfig", name=name,
                          value=str(value))

        return await self._alter_configs(
            api.ALTER_CONFIGS,
            {r: [functools.partial(entry, name=k, value=v) for k, v in c.items()]
             for r, c in configs.items()},
            validate_only,
        )

    async def incremental_alter_configs(
        self, ops: Mapping[ConfigResource, Sequence[AlterConfigOp]], *,
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Change single configs (IncrementalAlterConfigs: SET, DELETE back to the default,
        APPEND to / SUBTRACT from a list); each resource's error or None."""

        def entry(version: int, op: AlterConfigOp) -> Any:
            return nested(api.INCREMENTAL_ALTER_CONFIGS, version, "AlterableConfig",
                          name=op.name, config_operation=int(op.op), value=op.value)

        return await self._alter_configs(
            api.INCREMENTAL_ALTER_CONFIGS,
            {r: [functools.partial(entry, op=op) for op in items] for r, items in ops.items()},
            validate_only,
        )

    async def _alter_configs(
        self, api_key: int, entries: Mapping[ConfigResource, list[Any]], validate_only: bool
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Send each resource's entries (builders of AlterableConfig by version) to the
        broker that serves the resource."""
        out: dict[ConfigResource, KafkaClientError | None] = {}
        for node, items in _by_config_node(entries).items():

            def build(version: int, items: list[ConfigResource] = items) -> Any:
                return request(
                    api_key,
                    version,
                    validate_only=validate_only,
                    resources=tuple(
                        nested(api_key, version, "AlterConfigsResource",
                               resource_type=r.type, resource_name=r.name,
                               configs=tuple(make_entry(version) for make_entry in entries[r]))
                        for r in items
                    ),
                )

            response = await self.client.call(node, api_key, build)
            for result in response.responses:
                resource = ConfigResource(
                    ConfigResourceType(int(result.resource_type)), result.resource_name
                )
                out[resource] = _error_or_none(
                    result.error_code, result.error_message, f"alter configs of {resource.name!r}"
                )
        return out

    async def force_terminate_transaction(self, transactional_id: str) -> None:
        """Abort ``transactional_id``'s ongoing transaction, prepared or not (KIP-939):
        InitProducerId without KeepPreparedTxn, which also fences its current producer."""

        async def attempt() -> None:
            node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, transactional_id)
            try:
                response = await self.client.call(
                    node,
                    api.INIT_PRODUCER_ID,
                    lambda v: request(
                        api.INIT_PRODUCER_ID,
                        v,
                        transactional_id=transactional_id,
                        # Any valid timeout will do: the terminated id keeps no transaction,
                        # and 1 ms is within every broker's transaction.max.timeout.ms.
                        transaction_timeout=FORCE_TERMINATE_TIMEOUT_MS,
                        producer_id=-1,
                        producer_epoch=-1,
                        enable2_pc=False,
                        keep_prepared_txn=False,
                    ),
                )
            except RetriableError:
                self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, transactional_id)
                raise
            code = ErrorCode(response.error_code)
            if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
                self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, transactional_id)
            if code != ErrorCode.none:
                raise error_for(code, f"force-terminate {transactional_id}")

        await self.client.retrying(attempt, what=f"force-terminate {transactional_id}")
        logger.info("force-terminated transaction %r", transactional_id)

    async def abort_transaction(
        self,
        topic_partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """Java's Admin.abortTransaction: write an ABORT marker for ``producer_id``'s open
        transaction on one partition (a hanging transaction no coordinator will finish).
        Sent once to the partition's leader as WriteTxnMarkers; the partition's error (e.g.
        INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED) is raised."""
        tp = TopicPartition(*topic_partition)
        meta = await self.client.refresh_metadata(all_topics=True)  # never creates topics
        info = meta.topics.get(tp.topic)
        if info is None or info.error != ErrorCode.none or tp.partition not in info.leaders:
            raise UnknownTopicOrPartitionError(f"{tp.topic}-{tp.partition} does not exist")
        leader = info.leaders[tp.partition]
        conn = await self.client.connection(leader)
        offered = conn.broker_versions.get(api.WRITE_TXN_MARKERS)
        low, high = _WRITE_TXN_MARKERS_VERSIONS
        if offered is None or offered[0] > high or offered[1] < low:
            raise UnsupportedVersionError(
                f"broker {leader} serves WriteTxnMarkers in versions {offered}, "
                f"abort_transaction needs {low}-{high}"
            )
        version = min(high, offered[1])
        body = request(
            api.WRITE_TXN_MARKERS,
            version,
            markers=(
                nested(
                    api.WRITE_TXN_MARKERS,
                    version,
                    "WritableTxnMarker",
                    producer_id=producer_id,
                    producer_epoch=producer_epoch,
                    transaction_result=False,
                    coordinator_epoch=coordinator_epoch,
                    topics=(
                        nested(
                            api.WRITE_TXN_MARKERS,
                            version,
                            "WritableTxnMarkerTopic",
                            name=tp.topic,
                            partition_indexes=(tp.partition,),
                        ),
                    ),
                ),
            ),
        )
        response = await conn.send(body)
        codes = [
            ErrorCode(p.error_code)
            for m in response.markers
            for t in m.topics
            for p in t.partitions
            if t.name == tp.topic and int(p.partition_index) == tp.partition
        ]
        if not codes:
            raise UnknownTopicOrPartitionError(f"no answer for {tp.topic}-{tp.partition}")
        if codes[0] != ErrorCode.none:
            raise error_for(
                codes[0],
                f"abort transaction of producer {producer_id} epoch {producer_epoch} "
                f"on {tp.topic}-{tp.partition}",
            )
        logger.info(
            "aborted the transaction of producer %d epoch %d on %s-%d",
            producer_id,
            producer_epoch,
            tp.topic,
            tp.partition,
        )
