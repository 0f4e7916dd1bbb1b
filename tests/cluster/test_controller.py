"""The controller's shell (oncelog.broker.cluster.controller) against a real etcd: two
brokers campaign and one acts; the internal topics appear once enough brokers are alive;
the controller's store closing hands the role over and the new controller finishes the
elections; a registration vanishing moves leaders; a controlled shutdown moves leadership
away; a refused compare-and-swap is decided again (also in an ElectLeaders election).
Waits are on the controllers' images (updated by the watch) with deadlines, never sleeps."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from oncelog.broker.cluster.controller import Controller, ControllerSettings
from oncelog.cluster.controller_decisions import ElectionType
from oncelog.cluster.metadata import (
    NO_LEADER,
    BrokerRegistration,
    MetadataImage,
    MetadataStoreError,
    PartitionState,
)
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.errors import ErrorCode
from oncelog.harness.etcd import EtcdProcess, unique_prefix
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC, InternalTopicSpec

DEADLINE_S = 20.0
SETTINGS = ControllerSettings(
    auto_leader_rebalance=False,
    internal_topics={
        TRANSACTION_STATE_TOPIC: InternalTopicSpec(3, 3, {"cleanup.policy": "compact"}),
    },
)


def registration(node_id: int, *, shutting_down: bool = False) -> BrokerRegistration:
    return BrokerRegistration(node_id, "127.0.0.1", 9000 + node_id, shutting_down=shutting_down)


class Cluster:
    """Brokers 1..n registered in one etcd prefix; brokers in ``controllers`` also run a
    Controller."""

    def __init__(self, etcd: EtcdProcess, store_class: type[EtcdMetadataStore]) -> None:
        self.etcd = etcd
        self.prefix = unique_prefix()
        self.store_class = store_class
        self.stores: dict[int, EtcdMetadataStore] = {}
        self.controllers: dict[int, Controller] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}

    async def add(self, node_id: int, *, controller: bool) -> None:
        cls = self.store_class if controller else EtcdMetadataStore
        store = cls([(self.etcd.host, self.etcd.port)], prefix=self.prefix)
        await store.register_broker(registration(node_id))
        self.stores[node_id] = store
        if controller:
            self.controllers[node_id] = Controller(store, node_id, SETTINGS,
                                                   retry_backoff_s=0.1)
            self.tasks[node_id] = asyncio.create_task(self.controllers[node_id].run())

    async def start_three(self) -> None:
        """Brokers 1 (the controller), 2 and 3, once the internal topic exists."""
        await self.add(1, controller=True)
        await self.add(2, controller=False)
        await self.add(3, controller=False)
        await self.wait(1, created)

    def active(self) -> list[int]:
        return [n for n, c in self.controllers.items() if c.is_active]

    async def stop(self, node_id: int) -> None:
        """The broker goes: its lease is revoked, its controller (if any) stops."""
        task = self.tasks.pop(node_id, None)
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.controllers.pop(node_id)
        await self.stores.pop(node_id).close()

    async def wait(self, node_id: int, predicate: Callable[[MetadataImage], bool]) -> None:
        """Until ``predicate`` holds on the image of controller ``node_id``."""
        await self.controllers[node_id].wait_for(lambda c: predicate(c.image), DEADLINE_S)

    async def close(self) -> None:
        for node_id in list(self.stores):
            await self.stop(node_id)


@contextlib.asynccontextmanager
async def cluster_of(
    etcd: EtcdProcess, store_class: type[EtcdMetadataStore] = EtcdMetadataStore
) -> AsyncIterator[Cluster]:
    cluster = Cluster(etcd, store_class)
    try:
        yield cluster
    finally:
        await cluster.close()


def txn_states(image: MetadataImage) -> list[PartitionState]:
    return [
        v.state for (topic, _), v in sorted(image.partitions.items())
        if topic == TRANSACTION_STATE_TOPIC
    ]


def created(image: MetadataImage) -> bool:
    return len(txn_states(image)) == 3


def off(node_id: int) -> Callable[[MetadataImage], bool]:
    """Does ``node_id`` neither lead nor sit in the ISR of any partition (all led)?"""

    def check(image: MetadataImage) -> bool:
        return all(s.leader not in (node_id, NO_LEADER) and node_id not in s.isr
                   for s in txn_states(image))

    return check


def test_one_controller_acts_and_the_other_takes_over_when_its_store_closes(
    etcd: EtcdProcess,
) -> None:
    async def scenario() -> None:
        async with cluster_of(etcd) as cluster:
            await cluster.add(1, controller=True)
            await cluster.add(2, controller=True)
            await cluster.wait(1, lambda image: image.controller is not None)
            assert len(cluster.active()) == 1
            assert txn_states(cluster.controllers[1].image) == []  # 2 brokers < factor 3
            await cluster.add(3, controller=False)
            await cluster.wait(1, created)
            await cluster.wait(2, created)
            assert all(sorted(s.isr) == [1, 2, 3] for s in txn_states(cluster.controllers[2].image))

            first = cluster.active()[0]
            other = 3 - first
            first_epoch = cluster.controllers[first].epoch
            await cluster.stop(first)

            def taken_over(image: MetadataImage) -> bool:
                states = txn_states(image)
                return (image.controller is not None and image.controller[0] == other
                        and all(s.leader not in (first, NO_LEADER) and first not in s.isr
                                for s in states))

            await cluster.wait(other, taken_over)
            controller = cluster.controllers[other]
            assert controller.epoch is not None and first_epoch is not None
            assert controller.epoch > first_epoch
            for state in txn_states(controller.image):
                assert state.leader in state.isr and len(state.isr) == 2

    asyncio.run(scenario())


def test_leaders_move_when_a_registration_vanishes(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        async with cluster_of(etcd) as cluster:
            await cluster.start_three()
            before = {k: v.state for k, v in cluster.controllers[1].image.partitions.items()}
            assert any(s.leader == 3 for s in before.values())
            await cluster.stop(3)

            await cluster.wait(1, off(3))
            for key, versioned in cluster.controllers[1].image.partitions.items():
                if before[key].leader == 3:
                    assert versioned.state.leader_epoch == before[key].leader_epoch + 1
                    assert versioned.state.controller_epoch == cluster.controllers[1].epoch
            assert cluster.controllers[1].stats.leader_elections >= 1

    asyncio.run(scenario())


def test_controlled_shutdown_moves_leadership_away(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        async with cluster_of(etcd) as cluster:
            await cluster.start_three()
            await cluster.stores[2].update_registration(registration(2, shutting_down=True))

            await cluster.wait(1, off(2))
            assert 2 in cluster.controllers[1].image.brokers  # still alive, just not leading
            assert cluster.controllers[1].stats.controlled_shutdowns >= 1

    asyncio.run(scenario())


class RacingStore(EtcdMetadataStore):
    """A store whose first partition write loses a race: just before it, another writer
    (a leader changing its ISR) updates the same partition."""

    raced = False

    async def compare_and_set_partition(
        self,
        topic: str,
        partition: int,
        state: PartitionState,
        expected_version: int,
        *,
        as_controller: tuple[int, int] | None = None,
    ) -> int | None:
        if not RacingStore.raced and topic == TRANSACTION_STATE_TOPIC:
            RacingStore.raced = True
            current = (await self.load()).partitions[(topic, partition)]
            assert current.version == expected_version
            competing = current.state.with_isr(current.state.isr)
            assert await super().compare_and_set_partition(
                topic, partition, competing, expected_version
            ) is not None
        return await super().compare_and_set_partition(
            topic, partition, state, expected_version, as_controller=as_controller
        )


def test_a_refused_write_is_decided_again_from_the_newer_state(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        async with cluster_of(etcd, RacingStore) as cluster:
            await cluster.start_three()
            await cluster.stop(3)

            await cluster.wait(1, off(3))
            controller = cluster.controllers[1]
            assert RacingStore.raced and controller.stats.cas_conflicts == 1
            # The re-decided write was based on the competing state: its partition epoch is
            # two past the creation's (the race's ISR write, then the controller's).
            assert max(s.partition_epoch for s in txn_states(controller.image)) == 2

    asyncio.run(scenario())


class FailingOnceStore(EtcdMetadataStore):
    """The controller's first partition write fails as when etcd is slow or out of reach
    (gRPC's deadline passes)."""

    failed = False

    async def compare_and_set_partition(self, *args: Any, **kwargs: Any) -> int | None:
        if kwargs.get("as_controller") is not None and not FailingOnceStore.failed:
            FailingOnceStore.failed = True
            raise MetadataStoreError(f"etcd at {self.endpoint}: Deadline Exceeded")
        return await super().compare_and_set_partition(*args, **kwargs)


def test_a_failing_store_does_not_stop_the_controller(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        async with cluster_of(etcd, FailingOnceStore) as cluster:
            await cluster.start_three()
            await cluster.stop(3)

            await cluster.wait(1, off(3))
            assert FailingOnceStore.failed
            assert not cluster.tasks[1].done() and cluster.active() == [1]

    asyncio.run(scenario())


class RacingElectionStore(EtcdMetadataStore):
    """Once ``armed``, the next controller write of a partition loses a race to a leader's
    ISR write on the same partition."""

    armed = False

    async def compare_and_set_partition(self, *args: Any, **kwargs: Any) -> int | None:
        if RacingElectionStore.armed and kwargs.get("as_controller") is not None:
            RacingElectionStore.armed = False
            key = (args[0], args[1])
            current = (await self.load()).partitions[key]
            competing = current.state.with_isr(current.state.isr)
            assert await super().compare_and_set_partition(
                *key, competing, current.version) is not None
        return await super().compare_and_set_partition(*args, **kwargs)


def test_elect_leaders_moves_back_to_the_preferred_replica_despite_a_race(
    etcd: EtcdProcess,
) -> None:
    async def scenario() -> None:
        async with cluster_of(etcd, RacingElectionStore) as cluster:
            await cluster.start_three()
            controller = cluster.controllers[1]
            key = (TRANSACTION_STATE_TOPIC, 0)
            preferred = controller.image.replicas(*key)[0]
            current = controller.image.partitions[key]
            other = next(r for r in current.state.isr if r != preferred)
            moved = current.state.with_leader(other, current.state.isr, 0)
            assert await cluster.stores[2].compare_and_set_partition(
                *key, moved, current.version) is not None
            await cluster.wait(1, lambda image: image.leader(*key) == other)

            RacingElectionStore.armed = True
            errors = await controller.elect_leaders(ElectionType.PREFERRED, [key], DEADLINE_S)
            assert errors == {key: ErrorCode.none}
            assert controller.stats.cas_conflicts == 1
            await cluster.wait(1, lambda image: image.leader(*key) == preferred)
            assert controller.image.partitions[key].state.leader_epoch == moved.leader_epoch + 1
            again = await controller.elect_leaders(ElectionType.PREFERRED, [key], DEADLINE_S)
            assert again == {key: ErrorCode.election_not_needed}

    asyncio.run(scenario())
