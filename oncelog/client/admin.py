"""oncelog.client.Admin: the synchronous admin client (topics, configs, cluster, consumer
groups and offsets, transactions and producers) over ``AIOAdmin`` on its own event loop
thread. Re-exported as ``oncelog.client.Admin``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from oncelog.client._loop import LoopThread
from oncelog.client.admin_views import HangingTransaction, find_hanging_transactions
from oncelog.client.aio.admin import (
    AIOAdmin,
    ClusterDescription,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    PartitionReassignment,
    ProducerState,
    ScramDeletion,
    ScramUpsertion,
    TopicDescription,
    TransactionDescription,
    TransactionListing,
)
from oncelog.client.config import ClientConfig
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    OffsetAndMetadata,
    TopicPartition,
)
from oncelog.security.acl import AclBinding, AclBindingFilter

__all__ = ["Admin"]


class Admin:
    """Topics, transactions and producers."""

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._config = ClientConfig(config)
        self._loop = LoopThread(f"oncelog-admin-{self._config['client.id']}")
        self._core = AIOAdmin(self._config)
        self._closed = False

    def _run(self, coro: Any, timeout: float | None = None) -> Any:
        return self._loop.run(coro, timeout)

    def create_topics(
        self, topics: Sequence[NewTopic], *, timeout_ms: int = 30000, validate_only: bool = False
    ) -> dict[str, KafkaClientError | None]:
        """Create topics; returns each topic's error, None for success."""
        return dict(
            self._run(
                self._core.create_topics(topics, timeout_ms=timeout_ms, validate_only=validate_only)
            )
        )

    def create_topic(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        config: Mapping[str, str] | None = None,
    ) -> None:
        """Create one topic; raises its error."""
        errors = self.create_topics(
            [NewTopic(name, num_partitions, replication_factor, dict(config or {}))]
        )
        if errors.get(name) is not None:
            raise errors[name]  # type: ignore[misc]

    def delete_topics(
        self, names: Sequence[str], *, timeout_ms: int = 30000
    ) -> dict[str, KafkaClientError | None]:
        return dict(self._run(self._core.delete_topics(names, timeout_ms=timeout_ms)))

    def list_topics(self, *, internal: bool = False) -> dict[str, int]:
        """Topic name -> partition count."""
        return dict(self._run(self._core.list_topics(internal=internal)))

    def describe_topics(self, names: Iterable[str] | None = None) -> dict[str, TopicDescription]:
        """Partitions and leaders of ``names`` (None: all topics, internal included)."""
        wanted = None if names is None else list(names)
        return dict(self._run(self._core.describe_topics(wanted)))

    def describe_cluster(
        self, *, include_authorized_operations: bool = False
    ) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster); with
        ``include_authorized_operations`` also the AclOperation codes allowed on the cluster."""
        result: ClusterDescription = self._run(
            self._core.describe_cluster(
                include_authorized_operations=include_authorized_operations
            )
        )
        return result

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        *,
        timeout_ms: int = 30000,
        validate_only: bool = False,
    ) -> dict[str, KafkaClientError | None]:
        """Grow topics to ``NewPartitions.total_count`` partitions, placed by its
        ``assignments`` if given; each topic's error, None for success."""
        return dict(
            self._run(
                self._core.create_partitions(
                    new_partitions, timeout_ms=timeout_ms, validate_only=validate_only
                )
            )
        )

    def elect_leaders(
        self,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        election_type: str = "preferred",
        timeout_ms: int = 30000,
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Leader election ("preferred" or "unclean") for ``partitions`` (None: all); each
        partition's error (ELECTION_NOT_NEEDED when its preferred leader leads) or None."""
        wanted = None if partitions is None else list(partitions)
        return dict(
            self._run(
                self._core.elect_leaders(
                    wanted, election_type=election_type, timeout_ms=timeout_ms
                )
            )
        )

    def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The partition reassignments in progress (of ``partitions``, None: all)."""
        wanted = None if partitions is None else list(partitions)
        return dict(
            self._run(self._core.list_partition_reassignments(wanted, timeout_ms=timeout_ms))
        )

    def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        timeout_ms: int = 30000,
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Reassign partitions to replicas (None cancels one in progress); each
        partition's error or None."""
        return dict(
            self._run(
                self._core.alter_partition_reassignments(reassignments, timeout_ms=timeout_ms)
            )
        )

    def describe_log_dirs(
        self, brokers: Iterable[int] | None = None
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Broker id -> log directory -> its description (partitions and sizes)."""
        wanted = None if brokers is None else list(brokers)
        return dict(self._run(self._core.describe_log_dirs(wanted)))

    def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        duration_filter_ms: int = -1,
    ) -> list[TransactionListing]:
        return list(
            self._run(
                self._core.list_transactions(
                    states=states, producer_ids=producer_ids, duration_filter_ms=duration_filter_ms
                )
            )
        )

    def describe_transactions(
        self, transactional_ids: Iterable[str]
    ) -> dict[str, TransactionDescription]:
        return dict(self._run(self._core.describe_transactions(list(transactional_ids))))

    def describe_producers(
        self, partitions: Iterable[TopicPartition], *, broker_id: int | None = None
    ) -> dict[TopicPartition, list[ProducerState]]:
        """Each partition's producers, from its leader or the replica on ``broker_id``."""
        return dict(self._run(self._core.describe_producers(list(partitions),
                                                            broker_id=broker_id)))

    def find_hanging_transactions(
        self, partitions: Sequence[TopicPartition], *, max_timeout_ms: int, now_ms: int
    ) -> list[HangingTransaction]:
        """Transactions open on ``partitions`` that no coordinator will finish
        (``oncelog.client.admin_views``)."""
        return list(self._run(find_hanging_transactions(
            self._core, list(partitions), max_timeout_ms=max_timeout_ms, now_ms=now_ms)))

    def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int = 30000
    ) -> dict[TopicPartition, int]:
        """Delete the records below each offset (-1: the high watermark); the new low
        watermark per partition."""
        return dict(self._run(self._core.delete_records(offsets, timeout_ms=timeout_ms)))

    def delete_consumer_group_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaClientError | None]:
        """Delete a group's committed offsets (KIP-496); each partition's error or None."""
        return dict(
            self._run(self._core.delete_consumer_group_offsets(group_id, list(partitions)))
        )

    def list_consumer_groups(self) -> list[ConsumerGroupListing]:
        """Every group of every broker (ListGroups), sorted by id."""
        return list(self._run(self._core.list_consumer_groups()))

    def describe_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, ConsumerGroupDescription]:
        """State, protocol type and members (with their partitions) of each group."""
        return dict(self._run(self._core.describe_consumer_groups(list(group_ids))))

    def delete_consumer_groups(
        self, group_ids: Iterable[str]
    ) -> dict[str, KafkaClientError | None]:
        """Delete empty groups and their offsets; each group's error or None."""
        return dict(self._run(self._core.delete_consumer_groups(list(group_ids))))

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """A group's committed offsets (of ``partitions``; None: all it has)."""
        wanted = None if partitions is None else list(partitions)
        return dict(self._run(self._core.list_consumer_group_offsets(
            group_id, wanted, require_stable=require_stable)))

    def list_offsets(
        self,
        partitions: Iterable[TopicPartition],
        spec: OffsetSpec | None = None,
        *,
        isolation_level: str = "read_uncommitted",
    ) -> dict[TopicPartition, int]:
        """Earliest, latest (default) or by-timestamp offsets of ``partitions``."""
        return dict(self._run(self._core.list_offsets(
            list(partitions), spec, isolation_level=isolation_level)))

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every config of each resource: name -> ConfigEntry (value, source, type...)."""
        return dict(self._run(self._core.describe_configs(
            list(resources), include_synonyms=include_synonyms,
            include_documentation=include_documentation,
        )))

    def alter_configs(
        self, configs: Mapping[ConfigResource, Mapping[str, str]], *, validate_only: bool = False
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """Replace each resource's overrides (legacy AlterConfigs); each one's error or None."""
        return dict(self._run(self._core.alter_configs(configs, validate_only=validate_only)))

    def incremental_alter_configs(
        self, ops: Mapping[ConfigResource, Sequence[AlterConfigOp]], *,
        validate_only: bool = False,
    ) -> dict[ConfigResource, KafkaClientError | None]:
        """SET / DELETE / APPEND / SUBTRACT single configs; each resource's error or None."""
        return dict(self._run(
            self._core.incremental_alter_configs(ops, validate_only=validate_only)
        ))

    def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int] | KafkaClientError]:
        """user -> {mechanism: iterations}, or that user's error (None: every user)."""
        return dict(self._run(self._core.describe_user_scram_credentials(users)))

    def alter_user_scram_credentials(
        self, alterations: Iterable[ScramUpsertion | ScramDeletion]
    ) -> dict[str, KafkaClientError | None]:
        """Add, replace or remove SCRAM credentials; each user's error, None for success."""
        return dict(self._run(self._core.alter_user_scram_credentials(alterations)))

    def create_acls(self, bindings: Iterable[AclBinding]
                    ) -> dict[AclBinding, KafkaClientError | None]:
        """Create ACL bindings; each one's error, None for success."""
        return dict(self._run(self._core.create_acls(bindings)))

    def describe_acls(self, flt: AclBindingFilter | None = None) -> list[AclBinding]:
        """The ACL bindings the filter matches (default: all)."""
        return list(self._run(self._core.describe_acls(flt)))

    def delete_acls(self, filters: Sequence[AclBindingFilter]
                    ) -> list[list[AclBinding] | KafkaClientError]:
        """Delete what each filter matches; per filter the deleted bindings or its error."""
        return list(self._run(self._core.delete_acls(filters)))

    def force_terminate_transaction(self, transactional_id: str) -> None:
        """KIP-939 forceTerminateTransaction: abort the ongoing (even prepared) transaction."""
        self._run(self._core.force_terminate_transaction(transactional_id))

    def abort_transaction(
        self,
        topic_partition: TopicPartition,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
    ) -> None:
        """Java's Admin.abortTransaction: write an ABORT marker for a hanging transaction of
        ``producer_id`` on one partition (WriteTxnMarkers to its leader)."""
        self._run(
            self._core.abort_transaction(
                topic_partition, producer_id, producer_epoch, coordinator_epoch
            )
        )

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._run(self._core.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
