"""The names of Kafka's internal topics, defined once for every layer: the group
coordinator's ``__consumer_offsets`` and the transaction coordinator's
``__transaction_state`` (Kafka's ``Topic.GROUP_METADATA_TOPIC_NAME`` and
``Topic.TRANSACTION_STATE_TOPIC_NAME``), and how both are created from the broker
configs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

OFFSETS_TOPIC: Final = "__consumer_offsets"
TRANSACTION_STATE_TOPIC: Final = "__transaction_state"
INTERNAL_TOPICS: Final = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


class _Config(Protocol):
    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class InternalTopicSpec:
    """How an internal topic is created: partitions, replication factor (used by the
    cluster's controller; one node has one replica) and topic configs."""

    partitions: int
    replication_factor: int
    configs: dict[str, str]


def internal_topic_specs(config: _Config) -> dict[str, InternalTopicSpec]:
    """Both internal topics as the broker configs describe them (Kafka's
    ``offsets.topic.*`` and ``transaction.state.log.*``): compacted, with their own
    segment size; ``__transaction_state`` with ``transaction.state.log.min.isr`` as its
    ``min.insync.replicas``."""
    return {
        OFFSETS_TOPIC: InternalTopicSpec(
            int(config["offsets.topic.num.partitions"]),
            int(config["offsets.topic.replication.factor"]),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
            },
        ),
        TRANSACTION_STATE_TOPIC: InternalTopicSpec(
            int(config["transaction.state.log.num.partitions"]),
            int(config["transaction.state.log.replication.factor"]),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
                # Kafka's TransactionStateManager.transactionTopicConfigs; __consumer_offsets
                # has no such setting (the broker's min.insync.replicas applies to it).
                "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
            },
        ),
    }
