"""The partition registry: this broker's topics and every partition's engine, opened at
start, looked up by the handlers, created and deleted with topics, moved between log
directories, and ticked for flush, producer expiry and retention.

Topics are kept in a small catalog file (``topics.json``, oncelog.broker.topic_catalog);
each partition's data lives in ``<log-dir>/<topic>-<partition>/`` (see oncelog.storage), in
one of the log directories (``log.dirs``, oncelog.broker.log_dirs): a new partition goes to
the directory holding the fewest, and ``move_partition`` moves one between them
(AlterReplicaLogDirs). One partition (engine, offline state, fetch waiters) is
oncelog.broker.partition.Partition. The names callers import from here are re-exported.

Cluster mode (``hosted_only``): the high watermarks are checkpointed per log directory in
``replication-offset-checkpoint`` (``checkpoint_high_watermarks``, every
``replica.high.watermark.checkpoint.interval.ms`` from the broker and at ``close``) and a
replica opened again starts from its checkpointed high watermark, as Kafka's ReplicaManager
does: never from its log end, which may hold what the ISR never had.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from oncelog.broker.log_dirs import (
    MOVING_SUFFIX,
    REMOVING_SUFFIX,
    log_dir_named,
    log_size,
    move_partition_dir,
    next_log_dir,
    partition_dirs,
    recover_locations,
)
from oncelog.broker.partition import Partition
from oncelog.broker.topic_catalog import (
    CATALOG_FILE,
    MAX_TOPIC_NAME_LENGTH,
    TopicInfo,
    adopt_partition_dirs,
    read_catalog,
    validate_topic_name,
    write_catalog,
)
from oncelog.clock import Clock
from oncelog.config import BrokerConfig, LogConfig, log_dir_paths
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.engines import open_engine
from oncelog.storage.offset_checkpoint import HIGH_WATERMARK_FILE, read_offsets, write_offsets
from oncelog.storage.unified_log import SnapshotJob, UnifiedLog

__all__ = [
    "CATALOG_FILE",
    "MAX_TOPIC_NAME_LENGTH",
    "MOVING_SUFFIX",
    "REMOVING_SUFFIX",
    "Partition",
    "PartitionRegistry",
    "TopicInfo",
    "log_size",
    "validate_topic_name",
]

log = logging.getLogger(__name__)


def _nothing(_partition: Partition) -> None:
    return None


class PartitionRegistry:
    """Owns the topic catalog and every partition log of this broker."""

    def __init__(self, data_dir: Path, config: BrokerConfig, clock: Clock) -> None:
        self.data_dir = data_dir
        # data_dir first; log.dirs may add more (see oncelog.config.log_dir_paths).
        self.log_dirs = log_dir_paths(config, data_dir)
        self.config = config
        self.clock = clock
        self.topics: dict[str, TopicInfo] = {}
        # Cluster mode: ``topics`` lists every topic of the cluster but only this broker's
        # replicas are opened (oncelog.broker.cluster.roles keeps both in step with the
        # metadata image); load() opens the partition directories found on disk.
        self.hosted_only = False
        # Cluster mode: asks the cluster to create a topic (auto.create.topics.enable).
        self.auto_creator: Callable[[str], None] | None = None
        self._partitions: dict[tuple[str, int], Partition] = {}
        # Producer-state snapshots taken at segment rolls are written (fsync included) by
        # one worker thread, in order, instead of inside the append on the event loop.
        self._snapshots = ThreadPoolExecutor(max_workers=1, thread_name_prefix="snapshots")
        # Called before a partition's log is closed, moved or deleted (the log cleaner stops
        # a pass over it: oncelog.broker.log_cleaner).
        self.before_log_change: Callable[[Partition], None] = _nothing
        # Cluster mode: the high watermarks read from the log directories' checkpoints at
        # load (replicas opened later start from them).
        self._checkpointed_hw: dict[tuple[str, int], int] = {}
        self._checkpoint_lock = threading.Lock()

    def _write_snapshot(self, job: SnapshotJob) -> None:
        self._snapshots.submit(job).add_done_callback(_log_snapshot_failure)

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
        locations = recover_locations(self.log_dirs)
        path = self.data_dir / CATALOG_FILE
        if path.exists():
            self.topics = read_catalog(path)
        elif partition_dirs(self.log_dirs):
            log.warning("%s is missing; rebuilding the topic list from the partition "
                        "directories in %s", path, ", ".join(map(str, self.log_dirs)))
        if adopt_partition_dirs(self.topics, self.log_dirs, internal_configs or {}):
            self._write_catalog()
        if self.hosted_only:
            for log_dir in self.log_dirs:
                self._checkpointed_hw.update(read_offsets(log_dir / HIGH_WATERMARK_FILE))
        for info in self.topics.values():
            log_config = LogConfig.resolve(self.config, info.configs)
            for index in range(info.partitions):
                location = locations.get((info.name, index))
                if location is None and self.hosted_only:
                    continue
                self._open_partition(info.name, index, log_config, location)
        logs = [p.raw_log for p in self._partitions.values()]
        recovered = sum(getattr(u.log, "opened_how", "") == "recovered" for u in logs)
        replayed = sum(getattr(u, "replayed_batches", 0) for u in logs)
        log.info(
            "loaded %d topics, %d partitions in %d ms: %d recovered after an unclean stop, "
            "%d batches replayed into producer state",
            len(self.topics), len(self._partitions),
            (time.perf_counter() - started) * 1000, recovered, replayed,
        )

    def _write_catalog(self) -> None:
        write_catalog(self.data_dir / CATALOG_FILE, self.topics)

    def _next_log_dir(self) -> Path:
        return next_log_dir(self.log_dirs, (p.log_dir for p in self._partitions.values()))

    def _open_engine(
        self, directory: Path, log_config: LogConfig, high_watermark: int | None = None
    ) -> UnifiedLog:
        return open_engine(
            self.config["storage.engine"],
            directory,
            log_config,
            self.clock,
            producer_id_expiration_ms=int(self.config["producer.id.expiration.ms"]),
            snapshot_writer=self._write_snapshot,
            # Cluster mode: replication moves the high watermark (what the ISR holds) and
            # the replica's role (leader or follower, at which epoch) comes from the metadata.
            auto_high_watermark=not self.hosted_only,
            leader_epoch=None if self.hosted_only else 0,
            transaction_verification=bool(
                self.config["transaction.partition.verification.enable"]
            ),
            high_watermark=high_watermark,
        )

    def _open_partition(
        self, topic: str, index: int, log_config: LogConfig, log_dir: Path | None = None
    ) -> Partition:
        log_dir = log_dir or self._next_log_dir()
        log = self._open_engine(log_dir / f"{topic}-{index}", log_config,
                                self._checkpointed_hw.get((topic, index)))
        partition = Partition(topic, index, log, log_dir)
        self._partitions[(topic, index)] = partition
        return partition

    # -- log directories ------------------------------------------------------------------
    def log_dir_named(self, path: str) -> Path | None:
        """The log directory whose absolute path is ``path``; None if none is."""
        return log_dir_named(self.log_dirs, path)

    def move_partition(self, topic: str, index: int, target: Path) -> None:
        """Move a partition's directory to the log directory ``target`` (AlterReplicaLogDirs).

        The log is closed, its directory copied (a rename on the same file system) to
        ``target`` durably, and reopened there; the partition object stays the same, so
        waiting fetches and producer state carry on. Runs on the event loop: nothing can
        append while the partition is between its two places."""
        partition = self.get(topic, index)
        if partition.log_dir == target:
            return
        self._snapshots.submit(lambda: None).result()  # no snapshot job left for the source
        self.before_log_change(partition)
        high_watermark = partition.high_watermark
        partition.log.close()
        log_config = partition.config
        try:
            if self.config["storage.engine"].startswith("file"):
                move_partition_dir(partition.name, partition.log_dir, target)
            reopened = self._open_engine(target / partition.name, log_config, high_watermark)
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

    # -- cluster mode: the metadata image decides (oncelog.broker.cluster.roles) ------
    def put_topic(self, info: TopicInfo) -> None:
        """Record a topic of the cluster (new, grown or reconfigured) in the catalog without
        opening any partition; the configs apply at once to the replicas held here."""
        old = self.topics.get(info.name)
        self.topics[info.name] = info
        self._write_catalog()
        if old is not None and old.configs != info.configs:
            self._apply(info.name, LogConfig.resolve(self.config, info.configs))

    def open_replica(self, topic: str, index: int) -> Partition:
        """This broker's replica of ``topic``-``index`` (a listed topic), opened (created
        empty if it has no directory yet) if it is not already."""
        partition = self._partitions.get((topic, index))
        if partition is None:
            partition = self._open_partition(topic, index, self.log_config(topic))
            log.info("opened replica %s-%d in %s", topic, index, partition.log_dir)
        return partition

    def remove_replica(self, topic: str, index: int, *, delete: bool) -> Partition | None:
        """Stop holding a replica: closed, and its directory removed if ``delete``."""
        partition = self._partitions.pop((topic, index), None)
        if partition is None:
            return None
        self._checkpointed_hw.pop((topic, index), None)
        partition.wake_waiters()
        with contextlib.suppress(OSError):  # an offline log: the rmtree below is the fallback
            partition.raw_log.delete() if delete else partition.raw_log.close()
        if delete:
            shutil.rmtree(partition.log_dir / partition.name, ignore_errors=True)
        log.info("%s replica %s", "deleted" if delete else "closed", partition.name)
        return partition

    def forget_topic(self, name: str) -> None:
        """Drop a topic the cluster deleted from the catalog (its replicas are removed
        first with ``remove_replica``)."""
        if self.topics.pop(name, None) is not None:
            self._write_catalog()
            log.info("forgot deleted topic %s", name)

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
        if self.hosted_only:  # cluster mode: the topic is created in the metadata store
            validate_topic_name(name)
            if self.auto_creator is None:
                raise KafkaError(ErrorCode.unknown_topic_or_partition, f"unknown topic {name!r}")
            self.auto_creator(name)
            raise KafkaError(ErrorCode.leader_not_available, f"topic {name!r} is being created")
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
                self.before_log_change(partition)
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

    def high_watermarks(self) -> dict[Path, dict[tuple[str, int], int]]:
        """Cluster mode: each log directory's high watermarks as they are now (an offline
        partition's is the last one it had in memory), for ``write_high_watermarks``."""
        by_dir: dict[Path, dict[tuple[str, int], int]] = {d: {} for d in self.log_dirs}
        for key, partition in self._partitions.items():
            by_dir.setdefault(partition.log_dir, {})[key] = partition.high_watermark
        return by_dir

    def write_high_watermarks(
        self, by_dir: Mapping[Path, Mapping[tuple[str, int], int]]
    ) -> None:
        """Write each log directory's ``replication-offset-checkpoint`` (blocking: fsyncs;
        the broker runs it in a worker thread, one write at a time)."""
        with self._checkpoint_lock:
            for log_dir, offsets in by_dir.items():
                write_offsets(log_dir / HIGH_WATERMARK_FILE, offsets)

    def checkpoint_high_watermarks(self) -> None:
        """Cluster mode: write every log directory's high-watermark checkpoint now."""
        if self.hosted_only:
            self.write_high_watermarks(self.high_watermarks())

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
        try:
            self.checkpoint_high_watermarks()
        except OSError as exc:
            log.error("high-watermark checkpoint at close failed: %s", exc)
        self._each_online(close)
        self._snapshots.shutdown(wait=True)


def _log_snapshot_failure(done: Future[None]) -> None:
    """A roll-snapshot job's unexpected failure (a job logs its own OSErrors) is logged, not
    lost in the writer thread; recovery replays the log tail from an older snapshot."""
    exc = done.exception()
    if exc is not None:
        log.error("producer snapshot write failed unexpectedly: %r", exc, exc_info=exc)
