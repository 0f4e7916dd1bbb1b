"""The partition registry: which topics exist, their partitions' logs, and fetch wake-ups.

Topics are kept in a small catalog file (``topics.json``) written atomically; each
partition's data lives in ``<data-dir>/<topic>-<partition>/`` (see oncelog.storage).
On a single node the high watermark is the log end offset once an append has returned.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import BrokerConfig, LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import BatchHeader
from oncelog.storage.files import atomic_write
from oncelog.storage.log import AppendResult
from oncelog.storage.unified_log import UnifiedLog

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
CATALOG_FILE = "topics.json"


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; INVALID_TOPIC_EXCEPTION when broken."""
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"illegal topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name longer than 249")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'",
        )


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class Partition:
    """One partition: its log plus the futures of fetches waiting for new data."""

    __slots__ = ("_waiters", "index", "log", "topic")

    def __init__(self, topic: str, index: int, log: UnifiedLog) -> None:
        self.topic = topic
        self.index = index
        self.log = log
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it are decided: no open transaction has records there."""
        return self.log.last_stable_offset

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int:
        offset = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        self.wake_waiters()
        return offset

    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        log_append_time_ms: int | None,
        *,
        from_client: bool = True,
    ) -> AppendResult:
        result = self.log.append(
            buf, headers, log_append_time_ms=log_append_time_ms, from_client=from_client
        )
        self.wake_waiters()
        return result

    def wake_waiters(self) -> None:
        if self._waiters:
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(None)
            self._waiters.clear()

    def add_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)


class PartitionRegistry:
    """Owns the topic catalog and every partition log of this broker."""

    def __init__(self, data_dir: Path, config: BrokerConfig, clock: Clock) -> None:
        self.data_dir = data_dir
        self.config = config
        self.clock = clock
        self.topics: dict[str, TopicInfo] = {}
        self._partitions: dict[tuple[str, int], Partition] = {}

    # -- loading and the catalog -------------------------------------------------------
    def load(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / CATALOG_FILE
        if path.exists():
            raw = json.loads(path.read_text())
            for entry in raw["topics"]:
                info = TopicInfo(
                    name=entry["name"],
                    topic_id=uuid.UUID(entry["topic_id"]),
                    partitions=int(entry["partitions"]),
                    configs=dict(entry.get("configs", {})),
                )
                self.topics[info.name] = info
        for info in self.topics.values():
            log_config = LogConfig.resolve(self.config, info.configs)
            for index in range(info.partitions):
                self._open_partition(info.name, index, log_config)
        log.info("loaded %d topics, %d partitions", len(self.topics), len(self._partitions))

    def _write_catalog(self) -> None:
        payload = {
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "partitions": t.partitions,
                    "configs": t.configs,
                }
                for t in self.topics.values()
            ]
        }
        path = self.data_dir / CATALOG_FILE
        atomic_write(path, json.dumps(payload, indent=1).encode())

    def _open_partition(self, topic: str, index: int, log_config: LogConfig) -> Partition:
        directory = self.data_dir / f"{topic}-{index}"
        log = UnifiedLog.open(
            directory,
            log_config,
            self.clock,
            producer_id_expiration_ms=int(self.config["producer.id.expiration.ms"]),
        )
        partition = Partition(topic, index, log)
        self._partitions[(topic, index)] = partition
        return partition

    # -- lookups ------------------------------------------------------------------------
    def get(self, topic: str, index: int) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
        return partition

    def find(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def partitions(self) -> Iterator[Partition]:
        return iter(list(self._partitions.values()))

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicInfo | None:
        for info in self.topics.values():
            if info.topic_id == topic_id:
                return info
        return None

    # -- topic administration -----------------------------------------------------------
    def create_topic(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str] | None = None,
        *,
        replication_factor: int = -1,
        validate_only: bool = False,
    ) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        if partitions == -1:
            partitions = int(self.config["num.partitions"])
        if partitions <= 0:
            raise KafkaError(ErrorCode.invalid_partitions, "partition count must be > 0")
        if replication_factor not in (-1, 1):
            raise KafkaError(
                ErrorCode.invalid_replication_factor,
                f"replication factor {replication_factor} is larger than the 1 broker available",
            )
        topic_configs = dict(configs or {})
        log_config = LogConfig.resolve(self.config, topic_configs)
        info = TopicInfo(name, uuid.uuid4(), partitions, topic_configs)
        if validate_only:
            return info
        self.topics[name] = info
        for index in range(partitions):
            self._open_partition(name, index, log_config)
        self._write_catalog()
        log.info("created topic %s with %d partitions %s", name, partitions, topic_configs)
        return info

    def ensure_internal_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        if name not in self.topics:
            self.create_topic(name, partitions, configs)

    def maybe_auto_create(self, name: str) -> TopicInfo:
        """The topic, created with broker defaults if auto-creation is on."""
        info = self.topics.get(name)
        if info is not None:
            return info
        if not self.config["auto.create.topics.enable"]:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        return self.create_topic(name, -1)

    def delete_topic(self, name: str) -> None:
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        if info.internal:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"cannot delete {name}")
        if not self.config["delete.topic.enable"]:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable=false")
        del self.topics[name]
        self._write_catalog()
        for index in range(info.partitions):
            partition = self._partitions.pop((name, index), None)
            if partition is not None:
                partition.wake_waiters()
                partition.log.delete()
        # Remove any directory the log did not (e.g. a partially created one).
        for index in range(info.partitions):
            shutil.rmtree(self.data_dir / f"{name}-{index}", ignore_errors=True)
        log.info("deleted topic %s", name)

    def create_partitions(self, name: str, count: int, *, validate_only: bool = False) -> None:
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
        if info.internal:
            raise KafkaError(ErrorCode.invalid_topic_exception, f"cannot resize {name}")
        if count <= info.partitions:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"topic has {info.partitions} partitions; {count} would not increase it",
            )
        if validate_only:
            return
        log_config = LogConfig.resolve(self.config, info.configs)
        for index in range(info.partitions, count):
            self._open_partition(name, index, log_config)
        info.partitions = count
        self._write_catalog()
        log.info("topic %s now has %d partitions", name, count)

    def log_config(self, name: str) -> LogConfig:
        return LogConfig.resolve(self.config, self.topics[name].configs)

    # -- maintenance ----------------------------------------------------------------------
    def maybe_flush_all(self) -> None:
        now = self.clock.now_ms()
        for partition in self.partitions():
            partition.log.maybe_flush(now)

    def flush_all(self) -> None:
        for partition in self.partitions():
            partition.log.flush()

    def remove_expired_producers(self) -> int:
        now = self.clock.now_ms()
        return sum(len(p.log.remove_expired_producers(now)) for p in self.partitions())

    def apply_retention(self) -> int:
        deleted = 0
        for partition in self.partitions():
            deleted += partition.log.apply_retention()
        return deleted

    def close(self) -> None:
        for partition in self.partitions():
            partition.wake_waiters()
            partition.log.close()
