"""Small value types shared by the producer, consumer and admin."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from oncelog.config import ConfigSource, ConfigType

__all__ = [
    "AlterConfigOp",
    "AlterConfigOpType",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ConsumerGroupMetadata",
    "Message",
    "OffsetAndMetadata",
    "PreparedTxnState",
    "RecordMetadata",
    "TopicPartition",
]

Headers = tuple[tuple[str, bytes | None], ...]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where the broker put a produced record. ``timestamp`` is the record's CreateTime, or
    the broker's LogAppendTime when the topic uses it."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class Message(NamedTuple):
    """A consumed record (a named tuple, as kafka-python's ConsumerRecord: made for every
    record consumed, so it costs no more than a tuple)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed position: the offset of the *next* record to read."""

    offset: int
    metadata: str = ""
    leader_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What ``send_offsets_to_transaction`` needs from a consumer (Java's
    ConsumerGroupMetadata): with the generation and member id the group coordinator can
    fence offsets from a zombie member."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class PreparedTxnState:
    """The identity of a prepared transaction (KIP-939): producer id and epoch.

    ``str(state)`` is ``"producerId:epoch"`` (empty for "no transaction", which
    ``PreparedTxnState()`` and ``PreparedTxnState("")`` both mean); ``PreparedTxnState(text)``
    parses it back. Store it next to the data an external transaction commits.
    """

    __slots__ = ("epoch", "producer_id")

    def __init__(self, text: str | None = None, *, producer_id: int = -1, epoch: int = -1) -> None:
        if text:
            head, sep, tail = text.strip().partition(":")
            try:
                if not sep:
                    raise ValueError
                producer_id, epoch = int(head), int(tail)
            except ValueError:
                raise ValueError(f"not a prepared transaction state: {text!r}") from None
            if producer_id < 0 or not 0 <= epoch <= 32767:
                raise ValueError(f"not a prepared transaction state: {text!r}")
        elif producer_id >= 0 and not 0 <= epoch <= 32767:
            raise ValueError(f"invalid epoch {epoch}")
        self.producer_id = producer_id if producer_id >= 0 else -1
        self.epoch = epoch if self.producer_id >= 0 else -1

    @property
    def has_transaction(self) -> bool:
        return self.producer_id >= 0

    def __str__(self) -> str:
        return f"{self.producer_id}:{self.epoch}" if self.has_transaction else ""

    def __repr__(self) -> str:
        return f"PreparedTxnState({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PreparedTxnState):
            return NotImplemented
        return (self.producer_id, self.epoch) == (other.producer_id, other.epoch)

    def __hash__(self) -> int:
        return hash((self.producer_id, self.epoch))


# -- configs (DescribeConfigs / AlterConfigs / IncrementalAlterConfigs) --------------------
class ConfigResourceType(enum.IntEnum):
    """The kinds of resource that have configs, numbered as the protocol numbers them."""

    TOPIC = 2
    BROKER = 4


class ConfigResource(NamedTuple):
    """A topic (by name) or a broker (by node id as text; ``""`` is the cluster-wide
    default of every broker)."""

    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | None = None) -> ConfigResource:
        """Broker ``node_id``'s configs; None: the cluster-wide broker default."""
        return cls(ConfigResourceType.BROKER, "" if node_id is None else str(node_id))


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """One layer a config's value could come from, the one in effect first."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config as DescribeConfigs answers it. ``value`` is None for sensitive configs;
    ``synonyms`` and ``documentation`` are empty / None unless they were asked for, and
    ``type`` is UNKNOWN from brokers that predate DescribeConfigs v3."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_read_only: bool = False
    is_sensitive: bool = False
    synonyms: tuple[ConfigSynonym, ...] = ()
    type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


class AlterConfigOpType(enum.IntEnum):
    """IncrementalAlterConfigs' operations. APPEND and SUBTRACT apply to list configs."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change of an incremental alteration (``value`` is ignored by DELETE)."""

    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET
