"""The cluster metadata as etcd holds it: the key layout under the prefix and the JSON codec
of each value, and the decoding of one stored key into a ``MetadataEvent``.

Sans-IO (``oncelog.cluster.metadata_store.EtcdMetadataStore`` does the round trips). Keys,
relative to ``metadata.etcd.prefix`` (default ``/oncelog``):

- ``cluster_id`` — a JSON string, created once.
- ``brokers/<node id>`` — a BrokerRegistration, attached to the broker's lease. The broker
  epoch is the key's create revision (Kafka used the czxid of the ephemeral
  ``/brokers/ids/<id>`` znode): new for every registration, unchanged when the broker
  rewrites its registration (``shutting_down``).
- ``controller`` — ``{"node_id", "epoch"}`` on the controller's lease; ``controller_epoch``
  — the last controller epoch handed out (a counter that survives the controller key).
- ``topics/<name>`` — a TopicAssignment.
- ``partitions/<topic>/<partition>`` — a PartitionState; its mod revision is the version
  compare-and-swap writes check (Kafka's znode version of the partition state).
- ``producer_id_block`` — ``{"next": <first free producer id>}``.
- ``scram_credentials`` — every SCRAM credential (oncelog.security.credentials' JSON:
  salt, stored key, server key, iterations per user and mechanism; never a password).
- ``acls`` — every ACL binding (oncelog.security.acl's JSON), watched into
  ``MetadataImage.acls``.

Topic names never contain ``/`` (Kafka allows ``[a-zA-Z0-9._-]``), so the last ``/`` of a
partition key separates topic and partition. Values are compact JSON with sorted keys; a
value that does not decode raises ``ValueError`` naming the key.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass
from typing import Any

from oncelog.cluster.metadata import (
    BrokerRegistration,
    MetadataEvent,
    PartitionState,
    TopicAssignment,
    VersionedPartitionState,
)

__all__ = [
    "MetadataKeys",
    "decode_broker",
    "decode_controller",
    "decode_event",
    "decode_json",
    "decode_partition",
    "decode_topic",
    "encode_broker",
    "encode_controller",
    "encode_json",
    "encode_partition",
    "encode_topic",
    "new_cluster_id",
]

BROKERS = "brokers/"
TOPICS = "topics/"
PARTITIONS = "partitions/"
CONTROLLER = "controller"
ACLS = "acls"


@dataclass(frozen=True, slots=True)
class MetadataKeys:
    """The etcd keys of one cluster, under ``prefix`` (leading ``/`` added, trailing
    dropped: ``oncelog`` and ``/oncelog/`` name the same cluster)."""

    prefix: str = "/oncelog"

    def __post_init__(self) -> None:
        normalized = "/" + self.prefix.strip("/")
        if normalized == "/":
            raise ValueError("metadata.etcd.prefix must name a directory, not the root")
        object.__setattr__(self, "prefix", normalized)

    def _key(self, relative: str) -> bytes:
        return f"{self.prefix}/{relative}".encode()

    @property
    def root(self) -> bytes:
        """The prefix every key of this cluster starts with (for range reads and watches)."""
        return self._key("")

    @property
    def cluster_id(self) -> bytes:
        return self._key("cluster_id")

    def broker(self, node_id: int) -> bytes:
        return self._key(f"{BROKERS}{node_id}")

    @property
    def controller(self) -> bytes:
        return self._key(CONTROLLER)

    @property
    def controller_epoch(self) -> bytes:
        return self._key("controller_epoch")

    def topic(self, name: str) -> bytes:
        return self._key(f"{TOPICS}{name}")

    def partition(self, topic: str, partition: int) -> bytes:
        return self._key(f"{PARTITIONS}{topic}/{partition}")

    def partitions_of(self, topic: str) -> bytes:
        """The prefix of every partition key of ``topic`` (the trailing ``/`` keeps
        ``foo`` from matching ``foo.bar``)."""
        return self._key(f"{PARTITIONS}{topic}/")

    @property
    def producer_id_block(self) -> bytes:
        return self._key("producer_id_block")

    @property
    def scram_credentials(self) -> bytes:
        return self._key("scram_credentials")

    @property
    def acls(self) -> bytes:
        return self._key(ACLS)

    def relative(self, key: bytes) -> str | None:
        """``key`` without the prefix; None for a key of another cluster."""
        text = key.decode()
        root = self.root.decode()
        return text[len(root):] if text.startswith(root) else None


def new_cluster_id() -> str:
    """A cluster id as Kafka makes them: a random UUID, base64url without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


def encode_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode_json(data: bytes, key: str) -> Any:
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{key}: not JSON ({exc})") from None


def _fields(data: bytes, key: str, names: tuple[str, ...]) -> dict[str, Any]:
    value = decode_json(data, key)
    if not isinstance(value, dict):
        raise ValueError(f"{key}: expected a JSON object, got {value!r}")
    missing = [name for name in names if name not in value]
    if missing:
        raise ValueError(f"{key}: missing {', '.join(missing)} in {value!r}")
    return value


def _int(value: Any, key: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key}: {name} must be an integer, got {value!r}")
    return value


def _ints(value: Any, key: str, name: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise ValueError(f"{key}: {name} must be a list, got {value!r}")
    return tuple(_int(item, key, name) for item in value)


# -- brokers ---------------------------------------------------------------------------------
def encode_broker(registration: BrokerRegistration) -> bytes:
    """The registration without its epoch (the store gives the epoch)."""
    return encode_json({
        "node_id": registration.node_id,
        "host": registration.host,
        "port": registration.port,
        "rack": registration.rack,
        "shutting_down": registration.shutting_down,
        "listeners": [{"name": name, "host": host, "port": port}
                      for name, host, port in registration.listeners],
    })


def decode_broker(data: bytes, epoch: int, key: str = "broker") -> BrokerRegistration:
    value = _fields(data, key, ("node_id", "host", "port"))
    rack = value.get("rack")
    if not isinstance(value["host"], str) or not (rack is None or isinstance(rack, str)):
        raise ValueError(f"{key}: host and rack must be strings in {value!r}")
    return BrokerRegistration(
        node_id=_int(value["node_id"], key, "node_id"),
        host=value["host"],
        port=_int(value["port"], key, "port"),
        rack=rack,
        epoch=epoch,
        shutting_down=bool(value.get("shutting_down", False)),
        listeners=_listeners(value.get("listeners", []), key),
    )


def _listeners(value: Any, key: str) -> tuple[tuple[str, str, int], ...]:
    if not isinstance(value, list):
        raise ValueError(f"{key}: listeners must be a list, got {value!r}")
    out = []
    for item in value:
        if not (isinstance(item, dict) and isinstance(item.get("name"), str)
                and isinstance(item.get("host"), str)):
            raise ValueError(f"{key}: a listener is {{name, host, port}}, got {item!r}")
        out.append((item["name"], item["host"], _int(item.get("port"), key, "port")))
    return tuple(out)


# -- topics ----------------------------------------------------------------------------------
def encode_topic(topic: TopicAssignment) -> bytes:
    return encode_json({
        "name": topic.name,
        "topic_id": str(topic.topic_id),
        "replicas": [list(replicas) for replicas in topic.replicas],
        "configs": dict(topic.configs),
    })


def decode_topic(data: bytes, key: str = "topic") -> TopicAssignment:
    value = _fields(data, key, ("name", "topic_id", "replicas"))
    configs = value.get("configs", {})
    if not isinstance(configs, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in configs.items()
    ):
        raise ValueError(f"{key}: configs must map strings to strings in {value!r}")
    if not isinstance(value["replicas"], list):
        raise ValueError(f"{key}: replicas must be a list in {value!r}")
    try:
        topic_id = uuid.UUID(value["topic_id"])
    except (AttributeError, TypeError, ValueError):
        raise ValueError(f"{key}: bad topic_id {value['topic_id']!r}") from None
    return TopicAssignment(
        name=str(value["name"]),
        topic_id=topic_id,
        replicas=tuple(_ints(r, key, "replicas") for r in value["replicas"]),
        configs=configs,
    )


# -- partitions ------------------------------------------------------------------------------
def encode_partition(state: PartitionState) -> bytes:
    return encode_json({
        "leader": state.leader,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
        "partition_epoch": state.partition_epoch,
        "controller_epoch": state.controller_epoch,
        "leader_broker_epoch": state.leader_broker_epoch,
    })


def decode_partition(data: bytes, key: str = "partition") -> PartitionState:
    names = ("leader", "leader_epoch", "isr", "partition_epoch", "controller_epoch")
    value = _fields(data, key, names)
    return PartitionState(
        leader=_int(value["leader"], key, "leader"),
        leader_epoch=_int(value["leader_epoch"], key, "leader_epoch"),
        isr=_ints(value["isr"], key, "isr"),
        partition_epoch=_int(value["partition_epoch"], key, "partition_epoch"),
        controller_epoch=_int(value["controller_epoch"], key, "controller_epoch"),
        # absent from states written before it was recorded
        leader_broker_epoch=_int(value.get("leader_broker_epoch", -1), key,
                                 "leader_broker_epoch"),
    )


# -- controller ------------------------------------------------------------------------------
def encode_controller(node_id: int, epoch: int) -> bytes:
    return encode_json({"node_id": node_id, "epoch": epoch})


def decode_controller(data: bytes, key: str = "controller") -> tuple[int, int]:
    value = _fields(data, key, ("node_id", "epoch"))
    return _int(value["node_id"], key, "node_id"), _int(value["epoch"], key, "epoch")


# -- events ----------------------------------------------------------------------------------
def decode_event(
    keys: MetadataKeys,
    key: bytes,
    value: bytes,
    *,
    deleted: bool,
    create_revision: int,
    mod_revision: int,
) -> MetadataEvent | None:
    """The change of one key as a MetadataEvent (``mod_revision`` is its revision; for a
    deletion, the revision of the deletion); None for keys the image does not hold
    (``cluster_id``, ``controller_epoch``, ``producer_id_block``, other prefixes)."""
    relative = keys.relative(key)
    if relative is None:
        return None
    name = relative
    if relative.startswith(BROKERS):
        node_id = _number(relative[len(BROKERS):], name)
        if deleted:
            return MetadataEvent("broker", mod_revision, deleted=True, node_id=node_id)
        broker = decode_broker(value, create_revision, name)
        return MetadataEvent("broker", mod_revision, broker=broker, node_id=node_id)
    if relative.startswith(TOPICS):
        topic_name = relative[len(TOPICS):]
        if deleted:
            return MetadataEvent("topic", mod_revision, deleted=True, topic_name=topic_name)
        topic = decode_topic(value, name)
        return MetadataEvent("topic", mod_revision, topic=topic, topic_name=topic_name)
    if relative.startswith(PARTITIONS):
        topic_name, slash, index = relative[len(PARTITIONS):].rpartition("/")
        if not slash or not topic_name:
            raise ValueError(f"{name}: not a partitions/<topic>/<partition> key")
        partition = (topic_name, _number(index, name))
        if deleted:
            return MetadataEvent("partition", mod_revision, deleted=True, partition=partition)
        versioned = VersionedPartitionState(decode_partition(value, name), mod_revision)
        return MetadataEvent(
            "partition", mod_revision, partition=partition, partition_state=versioned
        )
    if relative == ACLS:
        return MetadataEvent("acls", mod_revision, deleted=deleted,
                             acls=None if deleted else bytes(value))
    if relative == CONTROLLER:
        if deleted:
            return MetadataEvent("controller", mod_revision, deleted=True)
        return MetadataEvent("controller", mod_revision, controller=decode_controller(value))
    return None


def _number(text: str, key: str) -> int:
    if not text.isdigit():
        raise ValueError(f"{key}: {text!r} is not a non-negative integer")
    return int(text)
