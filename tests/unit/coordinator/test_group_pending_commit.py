"""A plain OffsetCommit stays pending until the in-sync replicas of its offsets partition
have it (Kafka's storeOffsets: prepareOffsetCommit, the acks=-1 append, then
onOffsetCommitAppend or failPendingOffsetWrite): OffsetFetch does not see it meanwhile, and
a failed wait reverts it and answers the translated error."""

from __future__ import annotations

import asyncio

from group_support import Env, make_env

from oncelog.errors import ErrorCode

E = ErrorCode
T0 = ("t", 0)


class HeldAcks:
    """A store wait that answers ``code`` once ``release`` is set."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.code = E.none
        self.waits = 0

    async def wait_for_isr(self, partition: int, required_offset: int, timeout_ms: int
                           ) -> ErrorCode:
        self.waits += 1
        await self.release.wait()
        return self.code


def fetched(env: Env) -> int:
    return env.coordinator.fetch_offsets("g", [T0])[T0].offset


async def commit_held(env: Env, acks: HeldAcks, offset: int) -> dict[tuple[str, int], ErrorCode]:
    env.store.wait_for_isr = acks.wait_for_isr  # type: ignore[method-assign]
    task = asyncio.create_task(
        env.coordinator.handle_commit_offsets("g", -1, "", None, {T0: (offset, -1, "")}))
    while acks.waits == 0:
        await asyncio.sleep(0)
    assert fetched(env) != offset  # appended, not yet acknowledged: invisible
    acks.release.set()
    return await task


def test_offset_commit_visible_only_once_acknowledged() -> None:
    env = make_env()
    acks = HeldAcks()

    async def scenario() -> dict[tuple[str, int], ErrorCode]:
        return await commit_held(env, acks, 5)

    assert asyncio.run(scenario()) == {T0: E.none}
    assert fetched(env) == 5


def test_failed_wait_reverts_the_commit_and_answers_the_translated_error() -> None:
    env = make_env()
    assert env.coordinator.commit_offsets("g", -1, "", None, {T0: (3, -1, "")}) == {T0: E.none}
    acks = HeldAcks()
    acks.code = E.request_timed_out

    async def scenario() -> dict[tuple[str, int], ErrorCode]:
        return await commit_held(env, acks, 9)

    assert asyncio.run(scenario()) == {T0: E.coordinator_not_available}
    assert fetched(env) == 3  # the earlier commit stays; the failed one is gone


def test_single_node_commit_is_visible_at_once() -> None:
    env = make_env()
    answer = asyncio.run(env.coordinator.handle_commit_offsets(
        "g", -1, "", None, {T0: (4, -1, "")}))
    assert answer == {T0: E.none}
    assert fetched(env) == 4
