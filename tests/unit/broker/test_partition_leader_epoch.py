"""KIP-320 checks of a partition's leader epoch (Kafka's Partition.localLogWithEpochOrThrow):
older is FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 is not checked; a follower is
NOT_LEADER_OR_FOLLOWER unless the request may read a follower."""

from __future__ import annotations

import pytest

from oncelog.broker.partition import Partition
from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.memory_engine import open_memory_engine


def partition_at(epoch: int, *, leader: bool = True) -> Partition:
    engine = open_memory_engine("t-0", LogConfig(), FakeClock(), leader_epoch=None)
    if leader:
        engine.become_leader(epoch)
    else:
        engine.become_follower(epoch)
    return Partition("t", 0, engine)


def code_of(partition: Partition, current: int, *, require_leader: bool = True) -> ErrorCode:
    try:
        partition.check_leader_epoch(current, require_leader=require_leader)
    except KafkaError as exc:
        return exc.code
    return ErrorCode.none


def test_epochs_are_compared_with_the_partitions() -> None:
    partition = partition_at(5)
    assert partition.leader_epoch == 5
    assert code_of(partition, -1) == ErrorCode.none
    assert code_of(partition, 5) == ErrorCode.none
    assert code_of(partition, 4) == ErrorCode.fenced_leader_epoch
    assert code_of(partition, 6) == ErrorCode.unknown_leader_epoch


def test_a_follower_answers_not_leader_after_the_epoch_check() -> None:
    follower = partition_at(5, leader=False)
    assert code_of(follower, 5) == ErrorCode.not_leader_or_follower
    assert code_of(follower, 4) == ErrorCode.fenced_leader_epoch
    assert code_of(follower, 5, require_leader=False) == ErrorCode.none


@pytest.mark.parametrize("epoch", [0, 3])
def test_end_offset_for_the_current_epoch_is_the_log_end(epoch: int) -> None:
    partition = partition_at(epoch)
    assert partition.end_offset_for_leader_epoch(epoch) == (epoch, 0)
    assert partition.epoch_for_offset(0) == epoch
