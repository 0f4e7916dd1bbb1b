"""oncelog.broker.partitions with several log directories: placement by fewest partitions,
loading from every directory, moving a partition, and the leftovers of a move cut short."""

from __future__ import annotations

import shutil
from pathlib import Path

from oncelog.broker.partitions import MOVING_SUFFIX, REMOVING_SUFFIX, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches


def registry_on(tmp_path: Path) -> PartitionRegistry:
    config = BrokerConfig({"log.dirs": f"{tmp_path / 'a'}, {tmp_path / 'b'}"})
    registry = PartitionRegistry(tmp_path / "a", config, FakeClock())
    registry.load()
    return registry


def append(registry: PartitionRegistry, topic: str, index: int, value: bytes) -> None:
    buf = bytearray(encode_batch([RecordInput(key=b"k", value=value)]))
    registry.get(topic, index).append(buf, validate_batches(buf, max_batch_bytes=1 << 20))


def test_placement_fewest_partitions_first_and_reload(tmp_path: Path) -> None:
    registry = registry_on(tmp_path)
    assert registry.log_dirs == [tmp_path / "a", tmp_path / "b"]
    registry.create_topic("t", 3)
    assert [registry.get("t", i).log_dir.name for i in range(3)] == ["a", "b", "a"]
    append(registry, "t", 1, b"x")
    registry.close()
    again = registry_on(tmp_path)
    assert again.get("t", 1).log_dir == tmp_path / "b"
    assert again.get("t", 1).high_watermark == 1


def test_move_then_reload_from_the_target(tmp_path: Path) -> None:
    registry = registry_on(tmp_path)
    registry.create_topic("t", 1)
    append(registry, "t", 0, b"before")
    partition = registry.get("t", 0)
    registry.move_partition("t", 0, tmp_path / "b")
    assert registry.get("t", 0) is partition and partition.log_dir == tmp_path / "b"
    assert not (tmp_path / "a" / "t-0").exists()
    append(registry, "t", 0, b"after")
    registry.close()
    again = registry_on(tmp_path)
    assert again.get("t", 0).log_dir == tmp_path / "b"
    assert again.get("t", 0).high_watermark == 2


def test_leftovers_of_a_cut_short_move_are_cleaned_at_load(tmp_path: Path) -> None:
    registry = registry_on(tmp_path)
    registry.create_topic("t", 1)
    append(registry, "t", 0, b"v")
    registry.close()
    source = tmp_path / "a" / "t-0"
    # A copy not yet renamed, a source renamed but not removed, and a finished copy whose
    # source was not yet renamed away: the partition is kept once, with its data.
    shutil.copytree(source, tmp_path / "b" / ("t-0" + MOVING_SUFFIX))
    shutil.copytree(source, tmp_path / "b" / ("x-0" + REMOVING_SUFFIX))
    shutil.copytree(source, tmp_path / "b" / "t-0")
    again = registry_on(tmp_path)
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == []
    assert again.get("t", 0).log_dir == tmp_path / "a"
    assert again.get("t", 0).high_watermark == 1
