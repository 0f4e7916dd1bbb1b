"""The asyncio admin client's cluster and partition administration: DescribeCluster,
ElectLeaders and partition reassignments (ListPartitionReassignments,
AlterPartitionReassignments) at the controller, DescribeLogDirs at each broker.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.client.aio.admin_types import (
    AdminBase,
    ClusterDescription,
    LogDirDescription,
    PartitionReassignment,
    ReplicaInfo,
    _by_topic,
    _error_or_none,
    _operations,
)
from oncelog.client.errors import KafkaClientError, error_for
from oncelog.client.types import TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api


class ClusterAdmin(AdminBase):
    """Cluster and partition placement; mixed into ``AIOAdmin``."""

    # ---------------------------------------------------------------- cluster

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
