"""A member the coordinator dropped (its session expired while the broker was paused: the
next heartbeat answers UNKNOWN_MEMBER_ID) loses its partitions at once, as Kafka's
ConsumerCoordinator.onJoinPrepare does when the heartbeat reset the generation
(onPartitionsLost). Found by ``oncelog verify --spawn single`` (issue 15): the oncelog
consumer went on returning records of its lost partition while it waited to rejoin, and its
transactions committed their offsets with generation -1 (accepted: KIP-447 only fences a
named member), so the input was transformed twice, by it and by the partition's new owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from oncelog.client.aio.group import GroupMember
from oncelog.client.types import TopicPartition
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from tests.unit.client.group_member_helpers import (
    ScriptedCoordinatorClient,
    as_client,
    run_in_generation,
)

OWNED = [TopicPartition("in", 1)]


class DroppedMemberClient(ScriptedCoordinatorClient):
    """The coordinator answers the first heartbeat UNKNOWN_MEMBER_ID, then never answers a
    JoinGroup (the member stays between generations)."""

    def __init__(self) -> None:
        super().__init__()
        self.joining = asyncio.Event()

    async def call(self, node: int, api_key: int, build: Callable[[int], Any],
                   timeout_ms: int | None = None) -> Any:
        if api_key == api.HEARTBEAT:
            return SimpleNamespace(error_code=ErrorCode.unknown_member_id)
        self.joining.set()
        await asyncio.Event().wait()  # the JoinGroup never completes


def test_a_dropped_member_loses_its_partitions_before_it_rejoins() -> None:
    client = DroppedMemberClient()
    lost: list[list[TopicPartition]] = []
    revoked: list[list[TopicPartition]] = []

    async def on_assign(_: list[TopicPartition]) -> None:
        return None

    async def on_revoke(partitions: list[TopicPartition]) -> None:
        revoked.append(partitions)

    async def scenario() -> GroupMember:
        member = GroupMember(as_client(client), "g", topics=["in"], on_assign=on_assign,
                             on_revoke=on_revoke, on_error=lambda _: None,
                             on_lost=lost.append)
        # A member of generation 5 owning in-1 until the heartbeat says it was dropped.
        await run_in_generation(member, client.joining, "m-1", 5, OWNED)
        return member

    member = asyncio.run(scenario())
    assert lost == [OWNED], "the partitions are lost as soon as the heartbeat says so"
    assert revoked == [], "lost partitions are not revoked (no commit for them)"
    assert member.assignment == [] and not member.joined.is_set()
    # Offsets of records read in generation 5 are committed as generation 5's, which the
    # coordinator refuses now, never as a member-less commit it would accept.
    metadata = member.metadata()
    assert (metadata.member_id, metadata.generation_id) == ("m-1", 5)
    assert (member.member_id, member.generation) == ("", -1)

