"""An offset commit (OffsetCommit, TxnOffsetCommit) is answered only once the in-sync
replicas of its ``__consumer_offsets`` partition have its records (Kafka's storeOffsets
appends with acks=-1): a failed wait answers the translated error for the committed
partitions; on a single node there is nothing to wait for."""

from __future__ import annotations

import asyncio

import pytest
from group_support import make_env

from oncelog.broker.api.group import _replicated
from oncelog.errors import ErrorCode

E = ErrorCode
T0, T1 = ("t", 0), ("t", 1)


@pytest.mark.parametrize(
    ("ack_error", "answer"),
    [
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator),
    ],
)
def test_offset_commit_answer_carries_the_isr_wait_error(
    ack_error: ErrorCode, answer: ErrorCode
) -> None:
    env = make_env()
    committed = env.coordinator.commit_offsets("g", -1, "", None, {T0: (5, -1, "")})
    assert committed == {T0: E.none}
    env.store.fail_acks = [ack_error]
    errors = asyncio.run(_replicated(env.coordinator, "g", {**committed, T1: E.unknown_member_id}))
    assert errors == {T0: answer, T1: E.unknown_member_id}


def test_txn_offset_commit_waits_for_the_end_of_its_own_append() -> None:
    env = make_env()
    waits: list[tuple[int, int]] = []

    async def wait_for_isr(partition: int, required_offset: int, timeout_ms: int) -> ErrorCode:
        waits.append((partition, required_offset))
        return E.none

    env.store.wait_for_isr = wait_for_isr  # type: ignore[method-assign]
    result = env.coordinator.commit_txn_offsets("tx", "g", 7, 0, -1, "", None, {T0: (9, -1, "")})
    assert result == {T0: E.none}
    assert asyncio.run(_replicated(env.coordinator, "g", result)) == result
    partition = env.coordinator.partition_for("g")
    assert waits == [(partition, len(env.store.partitions[partition]))]


def test_no_commit_no_wait() -> None:
    env = make_env()
    env.store.fail_acks = [E.request_timed_out]
    refused = {T0: E.illegal_generation}
    assert asyncio.run(_replicated(env.coordinator, "g", refused)) == refused
    assert env.store.fail_acks == [E.request_timed_out]
