"""The partition registry: which topics exist, their partitions' logs, and fetch wake-ups.

Topics are kept in a small catalog file (``topics.json``) written atomically; each
partition's data lives in ``<log-dir>/<topic>-<partition>/`` (see oncelog.storage), in one
of the log directories (``log.dirs``): a new partition goes to the directory holding the
fewest, and ``move_partition`` moves one between them (AlterReplicaLogDirs).
On a single node the high watermark is the log end offset once an append has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from oncelog.broker.datadir import DataDirError
from oncelog.clock import Clock
from oncelog.config import BrokerConfig, LogConfig, log_dir_paths
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import io_fault
from oncelog.internal_topics import INTERNAL_TOPICS
from oncelog.records.batch import BatchHeader
from oncelog.storage.engine import AppendOrigin, FetchResult, IsolationLevel
from oncelog.storage.engines import open_engine
from oncelog.storage.files import atomic_write, fsync_directory
from oncelog.storage.log import AppendResult
from oncelog.storage.producer_state import ProducerInfo
from oncelog.storage.unified_log import SnapshotJob, UnifiedLog

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
CATALOG_FILE = "topics.json"


_PARTITION_DIR = re.compile(r"^(?P<topic>[a-zA-Z0-9._-]+)-(?P<index>[0-9]+)$")
# A partition being moved in (copied, not yet renamed) or out (renamed, not yet removed):
# '~' cannot appear in a topic name, so these never look like a partition directory.
MOVING_SUFFIX = "~moving"
REMOVING_SUFFIX = "~removing"


def _partition_dirs(log_dirs: list[Path]) -> dict[str, int]:
    """Topic name -> partition count, from the ``<topic>-<partition>`` directories."""
    counts: dict[str, int] = {}
    for log_dir in log_dirs:
        for topic, index in _partitions_in(log_dir):
            counts[topic] = max(counts.get(topic, 0), index + 1)
    return counts


def _partitions_in(log_dir: Path) -> list[tuple[str, int]]:
    found = []
    for entry in log_dir.iterdir():
        match = _PARTITION_DIR.match(entry.name)
        if match and entry.is_dir():
            found.append((match["topic"], int(match["index"])))
    return found


def log_size(directory: Path) -> int:
    """Bytes of a partition's segment files (``*.log``), what Kafka calls the log's size."""
    total = 0
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(directory):
            with contextlib.suppress(FileNotFoundError):
                if entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
    return total


def _read_catalog(path: Path) -> dict[str, TopicInfo]:
    """The topics of ``topics.json``; DataDirError, saying how to recover, if unreadable."""
    try:
        raw = json.loads(path.read_bytes())
        topics: dict[str, TopicInfo] = {}
        for entry in raw["topics"]:
            info = TopicInfo(
                name=str(entry["name"]),
                topic_id=uuid.UUID(entry["topic_id"]),
                partitions=int(entry["partitions"]),
                configs={str(k): str(v) for k, v in entry.get("configs", {}).items()},
            )
            topics[info.name] = info
        return topics
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataDirError(
            f"{path} is damaged ({type(exc).__name__}: {exc}); to recover, move it aside "
            f"(mv {path} {path}.damaged) and start again: the topic list is then rebuilt "
            "from the partition directories, with new topic ids and broker-default topic "
            "configs (set any per-topic configs again afterwards)"
        ) from None


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


class _GuardedLog:
    """A partition's log seen through its I/O-error boundary.

    Every method call of the wrapped UnifiedLog that raises OSError (disk full, permission,
    EIO) takes the partition offline, as Kafka's log-directory failure handling does
    (``LogDirFailureChannel``, ``ReplicaManager.handleLogDirFailure``), and becomes
    KafkaError(KAFKA_STORAGE_ERROR); once offline, every method call raises it without
    touching the files. Attribute reads (offsets, config, producer state) stay available:
    they are in memory, and they let handlers answer the error per partition.
    """

    __slots__ = ("_log", "_partition")

    def __init__(self, log: UnifiedLog, partition: Partition) -> None:
        self._log = log
        self._partition = partition

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._log, name)
        if not callable(value):
            return value
        partition = self._partition

        def guarded(*args: Any, **kwargs: Any) -> Any:
            if partition.offline is not None:
                raise partition.storage_error()
            try:
                io_fault(name, partition.name)
                return value(*args, **kwargs)
            except OSError as exc:
                partition.take_offline(name, exc)
                raise partition.storage_error() from exc

        return guarded


class Partition:
    """One partition: its log plus the futures of fetches waiting for new data.

    ``log`` is the partition's UnifiedLog behind its I/O-error boundary (``_GuardedLog``);
    ``offline`` says why the partition was taken offline, None while it is healthy.
    """

    __slots__ = ("_waiters", "index", "log", "log_dir", "offline", "raw_log", "topic")

    def __init__(
        self, topic: str, index: int, log: UnifiedLog, log_dir: Path | None = None
    ) -> None:
        self.topic = topic
        self.index = index
        # The log directory (of log.dirs) holding this partition.
        self.log_dir = log_dir if log_dir is not None else log.directory.parent
        self.raw_log = log
        self.log: UnifiedLog = cast(UnifiedLog, _GuardedLog(log, self))
        self.offline: str | None = None
        # Fetches waiting for data, by isolation level (see _maybe_wake).
        self._waiters: dict[IsolationLevel, set[asyncio.Future[None]]] = {
            level: set() for level in IsolationLevel
        }

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    def replace_log(self, log: UnifiedLog, log_dir: Path) -> None:
        """Continue on ``log`` (the same partition reopened in ``log_dir`` after a move)."""
        self.raw_log = log
        self.log = cast(UnifiedLog, _GuardedLog(log, self))
        self.log_dir = log_dir

    def take_offline(self, operation: str, exc: OSError) -> None:
        """Stop using this partition's files after an I/O error (until a restart)."""
        if self.offline is None:
            self.offline = f"{operation} failed: {exc}"
            log.error(
                "partition %s is offline: I/O error during %s in %s: %s; answering "
                "KAFKA_STORAGE_ERROR for it until the broker is restarted with the disk fixed",
                self.name, operation, self.raw_log.directory, exc,
            )
        self.wake_waiters()

    def storage_error(self) -> KafkaError:
        return KafkaError(
            ErrorCode.kafka_storage_error,
            f"partition {self.name} is offline ({self.offline}) in {self.raw_log.directory}",
        )

    # -- offsets and configuration -----------------------------------------------------
    @property
    def config(self) -> LogConfig:
        return self.log.config

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def last_stable_offset(self) -> int:
        """Offsets below it are decided: no open transaction has records there."""
        return self.log.last_stable_offset

    def last_fetchable_offset(self, isolation: IsolationLevel) -> int:
        """Where a reader of ``isolation`` stops: the LSO (read_committed) or the HW."""
        return self.log.last_fetchable_offset(isolation)

    # -- writes ---------------------------------------------------------------------------
    def append(
        self,
        buf: bytearray,
        headers: list[BatchHeader],
        *,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        log_append_time_ms: int | None = None,
    ) -> AppendResult:
        before = self._offsets()
        result = self.log.append(
            buf, headers, origin=origin, log_append_time_ms=log_append_time_ms
        )
        self._maybe_wake(before)
        return result

    def append_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool
    ) -> int:
        before = self._offsets()
        offset = self.log.append_marker(producer_id, producer_epoch, coordinator_epoch, commit)
        self._maybe_wake(before)
        return offset

    # -- reads ----------------------------------------------------------------------------
    def read(
        self,
        offset: int,
        max_bytes: int,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
        *,
        min_one_batch: bool = True,
    ) -> FetchResult:
        """Whole batches from ``offset`` below the HW (read_uncommitted) or the LSO
        (read_committed, with the aborted transactions overlapping what is returned)."""
        return self.log.read(offset, max_bytes, isolation, min_one_batch=min_one_batch)

    def producers(self) -> list[ProducerInfo]:
        """The producers this partition knows (DescribeProducers), by producer id."""
        return self.log.producers()

    def open_transactions(self) -> int:
        """Transactions with records here and no marker yet."""
        return self.log.open_transactions()

    def has_open_transaction(self, producer_id: int) -> bool:
        return self.log.has_open_transaction(producer_id)

    def offset_for_timestamp(
        self, timestamp_ms: int, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[int, int] | None:
        return self.log.offset_for_timestamp(timestamp_ms, isolation)

    def max_timestamp_offset(
        self, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
    ) -> tuple[int, int] | None:
        return self.log.max_timestamp_offset(isolation)

    def flush(self) -> None:
        self.log.flush()

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords), durably; the new
        log start. Waiting read_committed fetches are woken: the LSO may have moved."""
        before = self._offsets()
        start = self.log.delete_records_before(offset)
        self._maybe_wake(before)
        return start

    # -- fetch waiters ----------------------------------------------------------------------
    def _offsets(self) -> tuple[int, int]:
        return self.log.high_watermark, self.log.last_stable_offset

    def _maybe_wake(self, before: tuple[int, int]) -> None:
        """Wake read_uncommitted waiters when the HW moved, read_committed ones only when the
        LSO moved (an append inside an open transaction gives them nothing to read)."""
        high_watermark, stable = self._offsets()
        if high_watermark != before[0]:
            self._wake(self._waiters[IsolationLevel.READ_UNCOMMITTED])
        if stable != before[1]:
            self._wake(self._waiters[IsolationLevel.READ_COMMITTED])

    @staticmethod
    def _wake(waiters: set[asyncio.Future[None]]) -> None:
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        waiters.clear()

    def wake_waiters(self) -> None:
        """Wake every waiting fetch (the partition went offline, was deleted or closed)."""
        for waiters in self._waiters.values():
            self._wake(waiters)

    def add_waiter(
        self,
        fut: asyncio.Future[None],
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> None:
        self._waiters[isolation].add(fut)

    def remove_waiter(self, fut: asyncio.Future[None]) -> None:
        for waiters in self._waiters.values():
            waiters.discard(fut)


class PartitionRegistry:
    """Owns the topic catalog and every partition log of this broker."""

    def __init__(self, data_dir: Path, config: BrokerConfig, clock: Clock) -> None:
        self.data_dir = data_dir
        # data_dir first; log.dirs may add more (see oncelog.config.log_dir_paths).
        self.log_dirs = log_dir_paths(config, data_dir)
        self.config = config
        self.clock = clock
        self.topics: dict[str, TopicInfo] = {}
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Producer-state snapshots taken at segment rolls are written (fsync included) by
        # one worker thread, in order, instead of inside the append on the event loop.
        self._snapshots = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshots")

    def _write_snapshot(self, job: SnapshotJob) -> None:
        self._snapshots.submit(job)

    # -- loading and the catalog -------------------------------------------------------
    def load(self, internal_configs: Mapping[str, Mapping[str, str]] | None = None) -> None:
        """Read the catalog and open every partition.

        The partition directories are the truth about what data exists: a topic whose
        directories are on disk but which the catalog does not list (``topics.json`` missing,
        or an entry lost) is rebuilt from them, with a new topic id and the broker's default
        configs (``internal_configs`` for internal topics), and a warning saying so. A
        catalog that cannot be read refuses the start (DataDirError) with how to recover.
        """
        started = time.perf_counter()
        for log_dir in self.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
        locations = self._recover_locations()
        path = self.data_dir / CATALOG_FILE
        if path.exists():
            self.topics = _read_catalog(path)
        elif _partition_dirs(self.log_dirs):
            log.warning("%s is missing; rebuilding the topic list from the partition "
                        "directories in %s", path, ", ".join(map(str, self.log_dirs)))
        if self._adopt_partition_dirs(internal_configs or {}):
            self._write_catalog()
        for info in self.topics.values():
            log_config = LogConfig.resolve(self.config, info.configs)
            for index in range(info.partitions):
                self._open_partition(
                    info.name, index, log_config, locations.get((info.name, index))
                )
        logs = [p.raw_log for p in self._partitions.values()]
        recovered = sum(getattr(u.log, "opened_how", "") == "recovered" for u in logs)
        replayed = sum(getattr(u, "replayed_batches", 0) for u in logs)
        log.info(
            "loaded %d topics, %d partitions in %d ms: %d recovered after an unclean stop, "
            "%d batches replayed into producer state",
            len(self.topics), len(self._partitions),
            (time.perf_counter() - started) * 1000, recovered, replayed,
        )

    def _adopt_partition_dirs(self, internal_configs: Mapping[str, Mapping[str, str]]) -> bool:
        """Add to the catalog what the partition directories show it lacks; True if any."""
        changed = False
        for topic, count in sorted(_partition_dirs(self.log_dirs).items()):
            info = self.topics.get(topic)
            if info is None:
                configs = dict(internal_configs.get(topic, {}))
                info = TopicInfo(topic, uuid.uuid4(), count, configs)
                self.topics[topic] = info
                log.warning(
                    "topic %s was not in %s: rebuilt from its partition directories with %d "
                    "partitions, new topic id %s, configs %s (per-topic configs cannot be "
                    "rebuilt from the data: any it had are lost)",
                    topic, CATALOG_FILE, count, info.topic_id, configs or "broker defaults",
                )
                changed = True
            elif count > info.partitions:
                log.warning(
                    "topic %s has partition directories up to %d but %s lists %d partitions: "
                    "keeping all %d", topic, count - 1, CATALOG_FILE, info.partitions, count,
                )
                info.partitions = count
                changed = True
        return changed

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

    def _recover_locations(self) -> dict[tuple[str, int], Path]:
        """Where each partition directory is, after finishing what a crash cut short.

        A move copies into ``<target>/<name>~moving``, renames that to ``<name>``, renames
        the source to ``<name>~removing`` and removes it. Leftover ``~moving`` copies are
        incomplete (the source is intact): removed. ``~removing`` ones are finished moves:
        removed. A partition found in two directories (a crash between the two renames) has
        two identical copies (its log was closed before the copy): the first is kept."""
        locations: dict[tuple[str, int], Path] = {}
        for log_dir in self.log_dirs:
            for entry in log_dir.iterdir():
                if entry.name.endswith((MOVING_SUFFIX, REMOVING_SUFFIX)) and entry.is_dir():
                    log.warning("removing %s, left by a partition move cut short", entry)
                    shutil.rmtree(entry)
            for key in _partitions_in(log_dir):
                if key in locations:
                    duplicate = log_dir / f"{key[0]}-{key[1]}"
                    log.warning(
                        "partition %s-%d is in both %s and %s (a move cut short after its "
                        "copy was complete): keeping %s, removing %s",
                        key[0], key[1], locations[key], log_dir, locations[key], duplicate,
                    )
                    shutil.rmtree(duplicate)
                    continue
                locations[key] = log_dir
        return locations

    def _next_log_dir(self) -> Path:
        """The log directory holding the fewest partitions (the first of those tied)."""
        counts = dict.fromkeys(self.log_dirs, 0)
        for partition in self._partitions.values():
            counts[partition.log_dir] = counts.get(partition.log_dir, 0) + 1
        return min(self.log_dirs, key=lambda d: counts[d])

    def _open_engine(self, directory: Path, log_config: LogConfig) -> UnifiedLog:
        return open_engine(
            self.config["storage.engine"],
            directory,
            log_config,
            self.clock,
            producer_id_expiration_ms=int(self.config["producer.id.expiration.ms"]),
            snapshot_writer=self._write_snapshot,
        )

    def _open_partition(
        self, topic: str, index: int, log_config: LogConfig, log_dir: Path | None = None
    ) -> Partition:
        log_dir = log_dir or self._next_log_dir()
        log = self._open_engine(log_dir / f"{topic}-{index}", log_config)
        partition = Partition(topic, index, log, log_dir)
        self._partitions[(topic, index)] = partition
        return partition

    # -- log directories ------------------------------------------------------------------
    def log_dir_named(self, path: str) -> Path | None:
        """The log directory whose absolute path is ``path``; None if none is."""
        if not os.path.isabs(path):
            return None
        wanted = Path(os.path.normpath(path))
        return next((d for d in self.log_dirs if d == wanted), None)

    def move_partition(self, topic: str, index: int, target: Path) -> None:
        """Move a partition's directory to the log directory ``target`` (AlterReplicaLogDirs).

        The log is closed, its directory copied (a rename on the same file system) to
        ``target`` durably, and reopened there; the partition object stays the same, so
        waiting fetches and producer state carry on. Runs on the event loop: nothing can
        append while the partition is between its two places."""
        partition = self.get(topic, index)
        if partition.log_dir == target:
            return
        source = partition.log_dir / partition.name
        final = target / partition.name
        staging = target / (partition.name + MOVING_SUFFIX)
        removing = partition.log_dir / (partition.name + REMOVING_SUFFIX)
        self._snapshots.submit(lambda: None).result()  # no snapshot job left for the source
        partition.log.close()
        log_config = partition.config
        try:
            if self.config["storage.engine"].startswith("file"):
                io_fault("move_partition", partition.name)
                _copy_durably(source, staging)
                staging.rename(final)
                fsync_directory(target)
                source.rename(removing)
                fsync_directory(partition.log_dir)
                shutil.rmtree(removing)
            reopened = self._open_engine(final, log_config)
        except OSError as exc:
            partition.take_offline("move_partition", exc)
            raise partition.storage_error() from exc
        old_dir = partition.log_dir
        partition.replace_log(reopened, target)
        log.info("moved partition %s from %s to %s", partition.name, old_dir, target)

    # -- lookups ------------------------------------------------------------------------
    def get(self, topic: str, index: int) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index}")
        if partition.offline is not None:
            raise partition.storage_error()
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
                with contextlib.suppress(OSError):  # the rmtree below is the fallback
                    partition.raw_log.delete()
        # Remove any directory the log did not (e.g. a partially created one).
        for log_dir in self.log_dirs:
            for index in range(info.partitions):
                shutil.rmtree(log_dir / f"{name}-{index}", ignore_errors=True)
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

    def set_topic_configs(
        self, name: str, configs: Mapping[str, str], *, validate_only: bool = False
    ) -> None:
        """Replace a topic's config overrides: validated (KafkaError INVALID_CONFIG), stored
        in the catalog, and applied to its partitions at once (``update_config``)."""
        info = self.topics.get(name)
        if info is None:
            raise KafkaError(
                ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist."
            )
        log_config = LogConfig.resolve(self.config, configs)
        if validate_only:
            return
        info.configs = dict(configs)
        self._write_catalog()
        self._apply(name, log_config)
        log.info("topic %s configs are now %s", name, info.configs)

    def refresh_log_configs(self) -> None:
        """Re-resolve every topic's settings after a broker default changed."""
        for name, info in self.topics.items():
            self._apply(name, LogConfig.resolve(self.config, info.configs))

    def _apply(self, name: str, log_config: LogConfig) -> None:
        for index in range(self.topics[name].partitions):
            partition = self._partitions.get((name, index))
            if partition is not None and partition.offline is None:
                partition.raw_log.update_config(log_config)

    # -- maintenance ----------------------------------------------------------------------
    def _each_online(self, operation: Callable[[Partition], int]) -> int:
        """Run ``operation`` on every online partition; one partition's storage error (which
        took it offline) does not stop the others."""
        total = 0
        for partition in self.partitions():
            if partition.offline is not None:
                continue
            try:
                total += operation(partition)
            except KafkaError as exc:
                log.warning("skipping partition %s: %s", partition.name, exc)
        return total

    def maybe_flush_all(self) -> None:
        now = self.clock.now_ms()
        self._each_online(lambda p: int(p.log.maybe_flush(now)))

    def flush_all(self) -> None:
        def flush(partition: Partition) -> int:
            partition.log.flush()
            return 0

        self._each_online(flush)

    def remove_expired_producers(self) -> int:
        now = self.clock.now_ms()
        return self._each_online(lambda p: len(p.log.remove_expired_producers(now)))

    def apply_retention(self) -> int:
        return self._each_online(lambda p: p.log.apply_retention())

    def close(self) -> None:
        def close(partition: Partition) -> int:
            partition.log.close()
            return 0

        for partition in self.partitions():
            partition.wake_waiters()
        self._each_online(close)
        self._snapshots.shutdown(wait=True)


def _copy_durably(source: Path, staging: Path) -> None:
    """Copy a partition directory's files to ``staging`` and fsync them and it."""
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for entry in sorted(source.iterdir()):
        if not entry.is_file():
            continue
        copied = staging / entry.name
        shutil.copyfile(entry, copied)
        with open(copied, "rb+") as handle:
            os.fsync(handle.fileno())
    fsync_directory(staging)
