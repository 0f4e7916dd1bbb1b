"""Helpers for the group coordinator tests: a coordinator on a FakeClock and an in-memory
store, and small wrappers that start JoinGroup/SyncGroup calls as tasks."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.results import JoinResult, SyncResult
from oncelog.coordinator.group.store import MemoryOffsetsStore

SESSION_MS = 10_000
REBALANCE_MS = 30_000
PROTOCOLS = [("range", b"sub-range"), ("roundrobin", b"sub-rr")]


@dataclass
class Env:
    coordinator: GroupCoordinator
    store: MemoryOffsetsStore
    clock: FakeClock
    config: BrokerConfig

    def advance(self, ms: int) -> None:
        """Move time on and run one sweep, as the background loop would."""
        self.clock.advance(ms)
        self.coordinator.tick()

    def reloaded(self) -> GroupCoordinator:
        """A fresh coordinator over the same store, loaded as at broker start."""
        fresh = GroupCoordinator(self.config, self.store, self.clock)
        fresh.load()
        return fresh


def make_env(initial_delay_ms: int = 3000, partitions: int = 50, **extra: Any) -> Env:
    values = {"group.initial.rebalance.delay.ms": str(initial_delay_ms)}
    values.update({k.replace("_", "."): str(v) for k, v in extra.items()})
    config = BrokerConfig(values)
    store = MemoryOffsetsStore(partitions)
    clock = FakeClock()
    return Env(GroupCoordinator(config, store, clock), store, clock, config)


def start_join(
    env: Env,
    group: str,
    member_id: str = "",
    *,
    instance_id: str | None = None,
    protocols: list[tuple[str, bytes]] | None = None,
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    client_id: str = "client",
    require_known: bool = False,
) -> asyncio.Task[JoinResult]:
    return asyncio.create_task(
        env.coordinator.join_group(
            group_id=group,
            member_id=member_id,
            group_instance_id=instance_id,
            protocol_type=protocol_type,
            protocols=PROTOCOLS if protocols is None else protocols,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=rebalance_ms,
            client_id=client_id,
            client_host="/127.0.0.1",
            require_known_member_id=require_known,
        )
    )


def start_sync(
    env: Env,
    group: str,
    join: JoinResult,
    assignments: dict[str, bytes] | None = None,
    *,
    instance_id: str | None = None,
) -> asyncio.Task[SyncResult]:
    return asyncio.create_task(
        env.coordinator.sync_group(
            group_id=group,
            generation_id=join.generation_id,
            member_id=join.member_id,
            group_instance_id=instance_id,
            protocol_type="consumer",
            protocol_name=join.protocol_name,
            assignments=assignments or {},
        )
    )


async def settle() -> None:
    """Let every ready task run until it blocks again."""
    for _ in range(5):
        await asyncio.sleep(0)


async def form_group(env: Env, group: str, count: int) -> list[JoinResult]:
    """Members join an empty group together and sync; returns their join results, leader
    first. Each member is assigned b"assignment-<member id>". Several members need a
    positive initial delay (with none, the first would form a generation alone)."""
    assert count == 1 or env.config["group.initial.rebalance.delay.ms"] > 0
    tasks = [start_join(env, group, client_id=f"c{i}") for i in range(count)]
    await settle()
    env.advance(env.config["group.initial.rebalance.delay.ms"])
    await settle()
    if not all(t.done() for t in tasks):  # a brand-new group waits one more delay
        env.advance(env.config["group.initial.rebalance.delay.ms"])
        await settle()
    joins = [t.result() for t in tasks]
    leader = next(j for j in joins if j.member_id == j.leader_id)
    followers = [j for j in joins if j is not leader]
    syncs = [start_sync(env, group, j) for j in followers]
    await settle()
    assignment = {j.member_id: f"assignment-{j.member_id}".encode() for j in joins}
    leader_sync = await start_sync(env, group, leader, assignment)
    assert leader_sync.error == 0
    for s in syncs:
        assert (await s).error == 0
    return [leader, *followers]
