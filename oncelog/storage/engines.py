"""Choosing a partition engine by URL (``storage.engine``): ``file:`` (the default, Kafka's
segment layout in the partition directory) or ``memory:`` (everything in memory, lost on
stop). The schemes are listed in ``oncelog.config.STORAGE_ENGINE_SCHEMES``, which the
broker config checks at start."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oncelog.clock import Clock
from oncelog.config import STORAGE_ENGINE_SCHEMES, LogConfig, storage_engine_scheme
from oncelog.storage.engine import PartitionEngine
from oncelog.storage.memory_engine import open_memory_engine
from oncelog.storage.unified_log import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    SnapshotWriter,
    UnifiedLog,
    write_now,
)

__all__ = ["STORAGE_ENGINE_SCHEMES", "open_engine"]


def open_engine(
    url: str,
    directory: Path,
    config: LogConfig,
    clock: Clock,
    *,
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    snapshot_writer: SnapshotWriter = write_now,
    auto_high_watermark: bool = True,
    leader_epoch: int | None = 0,
    transaction_verification: bool = False,
    high_watermark: int | None = None,
) -> UnifiedLog:
    """Open the partition whose data lives in ``directory`` (``<topic>-<partition>``) with
    the engine ``url`` names; ValueError for an unknown scheme. The memory engine uses only
    the directory's name and starts empty. ``snapshot_writer`` runs the file engine's
    producer-state snapshot jobs (pass one writing in a worker thread to keep fsync off the
    event loop); ``auto_high_watermark=False`` leaves the high watermark to the caller;
    ``leader_epoch`` (default 0: one node) is the epoch the engine leads from the start, None
    to wait for ``become_leader`` / ``become_follower`` (replication), when the high
    watermark starts from ``high_watermark`` (the checkpointed one; None: the log start);
    ``transaction_verification`` makes a transaction's first append present its KIP-890
    verification guard (the broker's ``transaction.partition.verification.enable``)."""
    scheme = storage_engine_scheme(url)
    engine: UnifiedLog
    if scheme == "memory":
        engine = open_memory_engine(
            directory.name, config, clock, producer_id_expiration_ms=producer_id_expiration_ms,
            auto_high_watermark=auto_high_watermark, leader_epoch=leader_epoch,
        )
    else:
        engine = UnifiedLog.open(
            directory, config, clock,
            producer_id_expiration_ms=producer_id_expiration_ms,
            snapshot_writer=snapshot_writer, auto_high_watermark=auto_high_watermark,
            leader_epoch=leader_epoch, high_watermark=high_watermark,
        )
    engine.producer_state.transaction_verification = transaction_verification
    return engine


if TYPE_CHECKING:

    def _implements_the_interface(engine: UnifiedLog) -> PartitionEngine:
        return engine  # mypy checks that every engine is a PartitionEngine
