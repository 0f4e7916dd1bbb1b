"""oncelog.broker.partitions: an I/O error on one partition's files takes that partition
offline (KAFKA_STORAGE_ERROR from then on, a log line naming its directory); the other
partitions and the broker's background sweeps keep working."""

from __future__ import annotations

import errno
import logging
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.partitions import Partition, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches


def append_one(partition: Partition) -> int:
    buf = bytearray(encode_batch([RecordInput(key=b"k", value=b"v")]))
    headers = validate_batches(buf, max_batch_bytes=1 << 20)
    return partition.append(buf, headers).base_offset


def _eio(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.EIO, "Input/output error")


@pytest.fixture
def registry(tmp_path: Path) -> PartitionRegistry:
    registry = PartitionRegistry(tmp_path / "data", BrokerConfig(), FakeClock())
    registry.load()
    registry.create_topic("t", 2)
    return registry


def test_io_error_takes_only_that_partition_offline(
    registry: PartitionRegistry, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    broken, healthy = registry.get("t", 0), registry.get("t", 1)
    assert append_one(broken) == 0
    monkeypatch.setattr(broken.raw_log, "append", _eio)
    with caplog.at_level(logging.ERROR), pytest.raises(KafkaError) as info:
        append_one(broken)
    assert info.value.code is ErrorCode.kafka_storage_error
    assert any(
        "t-0 is offline" in r.message and str(registry.data_dir / "t-0") in r.message
        and "Input/output error" in r.message
        for r in caplog.records
    )
    # Every later use of the partition answers KAFKA_STORAGE_ERROR, without touching files.
    monkeypatch.setattr(broken.raw_log, "read", _eio)
    for attempt in (
        lambda: registry.get("t", 0),
        lambda: broken.log.read(0, 1000),
        lambda: append_one(broken),
    ):
        with pytest.raises(KafkaError) as info:
            attempt()
        assert info.value.code is ErrorCode.kafka_storage_error
    assert broken.high_watermark == 1  # in-memory state still answers
    # The other partition and the sweeps are unaffected.
    assert append_one(healthy) == 0
    assert append_one(healthy) == 1
    registry.flush_all()
    registry.maybe_flush_all()
    registry.apply_retention()
    registry.close()


def test_io_error_in_a_background_flush_is_contained(
    registry: PartitionRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = registry.get("t", 1)
    monkeypatch.setattr(broken.raw_log, "flush", _eio)
    registry.flush_all()  # does not raise
    assert broken.offline is not None
    assert append_one(registry.get("t", 0)) == 0
    with pytest.raises(KafkaError):
        registry.get("t", 1)
