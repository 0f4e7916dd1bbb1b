"""oncelog.broker.partitions: a missing or incomplete topics.json is rebuilt from the
partition directories (data stays readable); a damaged one refuses the start, naming the
file and the way to recover. Damaged meta.properties likewise (oncelog.broker.datadir)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from oncelog.broker.datadir import META_FILE, DataDirError, load_meta
from oncelog.broker.partitions import CATALOG_FILE, PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.validate import validate_batches


def registry_on(data_dir: Path) -> PartitionRegistry:
    return PartitionRegistry(data_dir, BrokerConfig(), FakeClock())


def write_topics(data_dir: Path) -> None:
    registry = registry_on(data_dir)
    registry.load()
    registry.create_topic("a.b-c", 3)
    registry.create_topic("__consumer_offsets", 1, {"cleanup.policy": "compact"})
    buf = bytearray(encode_batch([RecordInput(key=b"k", value=b"v")]))
    registry.get("a.b-c", 2).append(buf, validate_batches(buf, max_batch_bytes=1 << 20))
    registry.close()


def test_missing_catalog_is_rebuilt_from_partition_dirs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data_dir = tmp_path / "data"
    write_topics(data_dir)
    (data_dir / CATALOG_FILE).unlink()
    registry = registry_on(data_dir)
    with caplog.at_level(logging.WARNING):
        registry.load({"__consumer_offsets": {"cleanup.policy": "compact"}})
    assert registry.topics["a.b-c"].partitions == 3
    assert registry.topics["a.b-c"].configs == {}
    assert registry.topics["__consumer_offsets"].configs == {"cleanup.policy": "compact"}
    assert registry.get("a.b-c", 2).high_watermark == 1
    assert registry.get("a.b-c", 2).log.read(0, 1 << 20).data
    assert (data_dir / CATALOG_FILE).exists()
    assert any("missing" in r.message and CATALOG_FILE in r.message for r in caplog.records)
    assert any("a.b-c" in r.message and "rebuilt" in r.message for r in caplog.records)
    registry.close()
    again = registry_on(data_dir)
    again.load()
    assert again.topics["a.b-c"].topic_id == registry.topics["a.b-c"].topic_id


def test_catalog_missing_a_topic_or_partitions_keeps_the_data(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    write_topics(data_dir)
    catalog = data_dir / CATALOG_FILE
    catalog.write_text('{"topics": []}')
    registry = registry_on(data_dir)
    registry.load()
    assert registry.topics["a.b-c"].partitions == 3
    assert registry.get("a.b-c", 2).high_watermark == 1


@pytest.mark.parametrize("garbage", [b"{not json", b'{"topics": [{"name": "x"}]}', b"\xff\x00"])
def test_damaged_catalog_refuses_with_how_to_recover(tmp_path: Path, garbage: bytes) -> None:
    data_dir = tmp_path / "data"
    write_topics(data_dir)
    (data_dir / CATALOG_FILE).write_bytes(garbage)
    with pytest.raises(DataDirError) as info:
        registry_on(data_dir).load()
    message = str(info.value)
    assert str(data_dir / CATALOG_FILE) in message and "is damaged" in message
    assert "mv " in message


@pytest.mark.parametrize("garbage", [b"\xff\xfe\x00", b"garbage\n", b"cluster.id=abc\n"])
def test_damaged_meta_properties_refuses(tmp_path: Path, garbage: bytes) -> None:
    (tmp_path / META_FILE).write_bytes(garbage)
    with pytest.raises(DataDirError) as info:
        load_meta(tmp_path, 1)
    assert str(tmp_path / META_FILE) in str(info.value)
    assert "node.id=1" in str(info.value)


def test_meta_properties_of_another_node_refuses(tmp_path: Path) -> None:
    first = load_meta(tmp_path, 1)
    assert load_meta(tmp_path, 1) == first
    with pytest.raises(DataDirError, match="--node-id 1"):
        load_meta(tmp_path, 2)
