"""Several log directories (``log.dirs``): placement at creation, DescribeLogDirs, and
moving a partition between directories with AlterReplicaLogDirs, its data read back before
and after a restart."""

from __future__ import annotations

from pathlib import Path

from clients import ConfluentClient, make_records
from kio.schema.alter_replica_log_dirs.v2 import request as arl
from kio.schema.describe_log_dirs.v4 import request as dld
from kio.schema.types import TopicName
from kio.static.primitive import i32
from rawkafka import request_once

from tests.conftest import BrokerFactory
from tests.support.names import unique_name, unique_topic


def where(bootstrap: str, topic: str) -> dict[int, tuple[str, int]]:
    """Partition -> (log dir, size) from DescribeLogDirs."""
    answer = request_once(bootstrap, dld.DescribeLogDirsRequest(topics=None))
    assert answer.error_code == 0
    found: dict[int, tuple[str, int]] = {}
    for result in answer.results:
        assert result.error_code == 0 and result.total_bytes >= result.usable_bytes > 0
        for entry in result.topics:
            if entry.name == topic:
                for p in entry.partitions:
                    assert p.offset_lag == 0 and not p.is_future_key
                    found[p.partition_index] = (result.log_dir, p.partition_size)
    return found


def move(bootstrap: str, topic: str, index: int, path: Path) -> int:
    answer = request_once(bootstrap, arl.AlterReplicaLogDirsRequest(dirs=(
        arl.AlterReplicaLogDir(path=str(path), topics=(
            arl.AlterReplicaLogDirTopic(name=TopicName(topic), partitions=(i32(index),)),
        )),
    )))
    return int(answer.results[0].partitions[0].error_code)


def test_partition_moves_between_log_dirs_and_keeps_its_data(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    first, second = tmp_path / "data", tmp_path / "second"
    broker = broker_factory(data_dir=first, configs={"log.dirs": f"{first},{second}"})
    client = ConfluentClient(broker.bootstrap)
    topic = unique_topic("dirs")
    client.create_topic(topic, 3)
    placed = where(broker.bootstrap, topic)
    # The directory holding the fewest partitions gets the next one, as in Kafka.
    assert sorted(d for d, _ in placed.values()).count(str(second)) >= 1
    assert {d for d, _ in placed.values()} == {str(first), str(second)}

    acked = client.produce(topic, make_records(30))
    assert len(acked) == 30
    source = Path(placed[0][0])
    target = second if source == first else first
    size = where(broker.bootstrap, topic)[0][1]
    assert size > 0

    assert move(broker.bootstrap, topic, 0, source) == 0  # already there: nothing to do
    assert move(broker.bootstrap, topic, 0, target) == 0
    assert where(broker.bootstrap, topic)[0] == (str(target), size)
    assert not (source / f"{topic}-0").exists() and (target / f"{topic}-0").is_dir()
    assert move(broker.bootstrap, topic, 0, tmp_path / "elsewhere") == 57  # LOG_DIR_NOT_FOUND
    assert move(broker.bootstrap, topic, 7, target) == 3  # UNKNOWN_TOPIC_OR_PARTITION

    # The moved partition takes appends and serves everything.
    acked += client.produce(topic, make_records(10, prefix="after-"))
    expected = [a.sent.value for a in sorted(acked, key=lambda a: a.offset) if a.partition == 0]
    assert len(expected) > len([a for a in acked[:30] if a.partition == 0]) > 0
    got = client.consume(topic, unique_name("g"), 40)
    assert [g.value for g in got if g.partition == 0] == expected

    broker.restart()
    assert where(broker.bootstrap, topic)[0][0] == str(target)
    got = client.consume(topic, unique_name("g"), 40)
    assert [g.value for g in got if g.partition == 0] == expected
