"""A group member whose coordinator moves (NOT_COORDINATOR, or its broker gone) finds the
new coordinator and goes on heartbeating in the same generation, as Kafka's
AbstractCoordinator does (markCoordinatorUnknown, no rejoin): a rejoin would bump the
generation, and an offset commit racing with it fails with ILLEGAL_GENERATION (seen in
tests/cluster/test_client_failover.py after the group's coordinator was killed)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from oncelog.client.aio.group import GroupMember
from oncelog.client.errors import BrokerConnectionError, KafkaClientError
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from tests.unit.client.group_member_helpers import (
    ScriptedCoordinatorClient,
    as_client,
    run_in_generation,
)


class MovingCoordinatorClient(ScriptedCoordinatorClient):
    """Answers heartbeats: first the old coordinator's broker is gone, then a broker answers
    NOT_COORDINATOR, then the new coordinator (node 2) answers; any JoinGroup is recorded."""

    def __init__(self) -> None:
        super().__init__()
        self.coordinators = iter([1, 1, 2, 2, 2, 2, 2, 2])
        self.calls: list[tuple[int, int]] = []
        self.heartbeats_answered = asyncio.Event()

    async def find_coordinator(self, key_type: int, key: str) -> int:
        return next(self.coordinators)

    async def call(self, node: int, api_key: int, build: Callable[[int], Any],
                   timeout_ms: int | None = None) -> Any:
        self.calls.append((node, api_key))
        if api_key != api.HEARTBEAT:
            raise AssertionError(f"unexpected API {api_key}: the member must not rejoin")
        heartbeats = sum(1 for _, key in self.calls if key == api.HEARTBEAT)
        if heartbeats == 1:
            raise BrokerConnectionError("cannot connect: the coordinator's broker is gone")
        if heartbeats == 2:
            return SimpleNamespace(error_code=ErrorCode.not_coordinator)
        if heartbeats >= 4:
            self.heartbeats_answered.set()
        return SimpleNamespace(error_code=ErrorCode.none)


def test_a_moved_coordinator_is_found_again_without_a_rejoin() -> None:
    client = MovingCoordinatorClient()
    errors: list[KafkaClientError] = []

    async def nothing(_: list[Any]) -> None:
        return None

    async def scenario() -> GroupMember:
        member = GroupMember(as_client(client), "g", topics=["t"], on_assign=nothing,
                             on_revoke=nothing, on_error=errors.append)
        # A member of generation 5 with its assignment, before the coordinator moves.
        await run_in_generation(member, client.heartbeats_answered, "m-1", 5)
        return member

    member = asyncio.run(scenario())
    assert member.generation == 5 and member.member_id == "m-1"
    assert member.joined.is_set()
    assert [key for _, key in client.calls] == [api.HEARTBEAT] * len(client.calls)
    assert client.calls[-1][0] == 2  # heartbeats go to the new coordinator
    assert client.invalidated >= 2 and errors == []

