"""Shared by the GroupMember unit tests: a client whose coordinator answers as each test
scripts it, and a member already in a generation, run until the scripted moment."""

from __future__ import annotations

import asyncio
from typing import Any

from oncelog.client.aio.group import GroupMember
from oncelog.client.config import ClientConfig
from oncelog.client.types import TopicPartition


class ScriptedCoordinatorClient:
    """The parts of KafkaClient a GroupMember uses; ``call`` is each test's script."""

    def __init__(self) -> None:
        self.config = ClientConfig({
            "bootstrap.servers": "127.0.0.1:1", "group.id": "g",
            "heartbeat.interval.ms": 1, "retry.backoff.ms": 1, "retry.backoff.max.ms": 1,
        })  # fmt: skip
        self.request_timeout_ms = 1000
        self.invalidated = 0

    async def find_coordinator(self, key_type: int, key: str) -> int:
        return 1

    def invalidate_coordinator(self, key_type: int, key: str) -> None:
        self.invalidated += 1

    def backoff_s(self, attempt: int) -> float:
        return 0.0


async def run_in_generation(member: GroupMember, until: asyncio.Event, member_id: str,
                            generation: int, owned: list[TopicPartition] | None = None) -> None:
    """Make ``member`` a member of ``generation`` (as after a completed join), run it until
    ``until`` is set, then stop it."""
    member.member_id, member.generation = member_id, generation
    member.assignment = list(owned or [])
    member._identity = (member_id, generation)
    member._rejoin_needed.clear()
    member.joined.set()
    task = asyncio.create_task(member.run())
    await asyncio.wait_for(until.wait(), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def as_client(client: ScriptedCoordinatorClient) -> Any:
    return client
