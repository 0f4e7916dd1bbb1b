"""oncelog.client: a Kafka producer, consumer and admin client with two-phase commit.

Synchronous classes over the asyncio core in ``oncelog.client.aio``; each instance runs its
core on its own event loop thread. Configuration is a dict of Kafka's config names::

    producer = Producer({"bootstrap.servers": "localhost:9092", "transactional.id": "t1",
                         "transaction.two.phase.commit.enable": True})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send("orders", b"value", key=b"k")
    state = producer.prepare_transaction()        # PreparedTxnState, store str(state)
    producer.complete_transaction(state)          # commit (abort if it does not match)

``send`` returns a ``RecordFuture`` (``concurrent.futures.Future``'s reading side) of
``RecordMetadata``; ``on_delivery`` callbacks run on the client's event loop thread and
must not call blocking client methods.
Errors are the classes in ``oncelog.client.errors`` (fatal / abortable / retriable).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.client.admin import Admin
    from oncelog.client.aio.admin import (
        ClusterDescription,
        ConsumerGroupDescription,
        ConsumerGroupListing,
        LogDirDescription,
        MemberDescription,
        NewPartitions,
        NewTopic,
        OffsetSpec,
        PartitionReassignment,
        ProducerState,
        TopicDescription,
        TransactionDescription,
        TransactionListing,
    )
    from oncelog.client.consumer import Consumer
    from oncelog.client.delivery import RecordFuture
    from oncelog.client.errors import KafkaClientError
    from oncelog.client.producer import Producer
    from oncelog.client.txn_state import TxnState
    from oncelog.client.types import (
        AlterConfigOp,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigResourceType,
        ConfigSource,
        ConfigSynonym,
        ConfigType,
        ConsumerGroupMetadata,
        Message,
        OffsetAndMetadata,
        PreparedTxnState,
        RecordMetadata,
        TopicPartition,
    )

__all__ = [
    "Admin",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "Consumer",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupMetadata",
    "KafkaClientError",
    "LogDirDescription",
    "MemberDescription",
    "Message",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionReassignment",
    "PreparedTxnState",
    "Producer",
    "ProducerState",
    "RecordFuture",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "TxnState",
]

# Each public name is imported from its module on first use (PEP 562): a program that needs
# only ``oncelog.client.errors`` (``oncelog serve``, every CLI command) does not pay for the
# whole client (admin, asyncio core, fetcher, aiokafka's codecs, SASL) at start-up.
_HOMES = {
    "Admin": "admin",
    "Consumer": "consumer",
    "KafkaClientError": "errors",
    "Producer": "producer",
    "RecordFuture": "delivery",
    "TxnState": "txn_state",
    **dict.fromkeys(
        [
            "ClusterDescription", "ConsumerGroupDescription", "ConsumerGroupListing",
            "LogDirDescription", "MemberDescription", "NewPartitions", "NewTopic", "OffsetSpec",
            "PartitionReassignment", "ProducerState", "TopicDescription",
            "TransactionDescription", "TransactionListing",
        ],
        "aio.admin",
    ),
    **dict.fromkeys(
        [
            "AlterConfigOp", "AlterConfigOpType", "ConfigEntry", "ConfigResource",
            "ConfigResourceType", "ConfigSource", "ConfigSynonym", "ConfigType",
            "ConsumerGroupMetadata", "Message", "OffsetAndMetadata", "PreparedTxnState",
            "RecordMetadata", "TopicPartition",
        ],
        "types",
    ),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
