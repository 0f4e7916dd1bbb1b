"""``EtcdMetadataStore`` against a real etcd (the module's ``etcd`` fixture): leases and
registrations, the controller election, compare-and-swap, producer id blocks, and the watch
that keeps every broker's image equal to a fresh load. Each test uses its own key prefix.
Waits are on watch events with deadlines, never sleeps."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from oncelog.cluster.metadata import (
    BrokerIdInUse,
    BrokerRegistration,
    MetadataEvent,
    MetadataImage,
    MetadataStoreError,
    PartitionState,
    SessionLost,
    TopicAssignment,
)
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.harness.etcd import EtcdProcess, unique_prefix

DEADLINE_S = 20.0


def make_store(etcd: EtcdProcess, prefix: str, **kwargs: int) -> EtcdMetadataStore:
    return EtcdMetadataStore([(etcd.host, etcd.port)], prefix=prefix, **kwargs)


def broker(node_id: int) -> BrokerRegistration:
    return BrokerRegistration(node_id=node_id, host="127.0.0.1", port=9000 + node_id)


async def next_event(
    events: AsyncIterator[MetadataEvent], matches: Callable[[MetadataEvent], bool]
) -> MetadataEvent:
    """The first event that ``matches`` (earlier ones are dropped), within the deadline."""
    async with asyncio.timeout(DEADLINE_S):
        async for event in events:
            if matches(event):
                return event
    raise AssertionError("the watch ended")


def test_registration_disappears_when_its_lease_expires(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        observer = make_store(etcd, prefix)
        # A broker that never renews its lease: it expires after the session timeout.
        silent = make_store(etcd, prefix, session_timeout_ms=1000, heartbeat_interval_ms=600_000)
        try:
            events = observer.watch((await observer.load()).revision)
            epoch = await silent.register_broker(broker(1))
            added = await next_event(events, lambda e: e.kind == "broker")
            assert not added.deleted and added.broker is not None
            assert added.broker.node_id == 1 and added.broker.epoch == epoch > 0
            gone = await next_event(events, lambda e: e.kind == "broker")
            assert gone.deleted and gone.node_id == 1
            assert 1 not in (await observer.load()).brokers
        finally:
            await silent.close()
            await observer.close()

    asyncio.run(scenario())


def test_unanswered_keep_alives_lose_the_session_and_the_broker_registers_again(
    etcd: EtcdProcess,
) -> None:
    """etcd out of reach (refreshes never answered, as behind a network cut): the session
    is lost once the TTL has run out since the last acknowledged refresh, without etcd ever
    saying so; registering again (the lost lease revoked first) gives a new epoch."""

    async def scenario() -> None:
        prefix = unique_prefix()
        store = make_store(etcd, prefix, session_timeout_ms=1000, heartbeat_interval_ms=200)
        try:
            first = await store.register_broker(broker(1))
            client = store._client
            refresh = client.refresh_lease

            async def unanswered(lease_id: int) -> None:
                await asyncio.Event().wait()

            client.refresh_lease = unanswered
            async with asyncio.timeout(DEADLINE_S):
                await store.session_lost.wait()
            client.refresh_lease = refresh
            second = await store.register_broker(broker(1))
            assert second > first and not store.session_lost.is_set()
            assert (await store.load()).brokers[1].epoch == second
        finally:
            await store.close()

    asyncio.run(scenario())


def test_close_removes_the_registration_at_once(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        observer = make_store(etcd, prefix)
        store = make_store(etcd, prefix)
        try:
            await store.register_broker(broker(1))
            assert (await observer.load()).live_brokers() == [1]
            await store.close()
            assert (await observer.load()).live_brokers() == []
            with pytest.raises(MetadataStoreError, match="closed"):
                await store.load()
        finally:
            await store.close()
            await observer.close()

    asyncio.run(scenario())


def test_a_live_broker_id_cannot_be_registered_twice(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        first, second, third = (make_store(etcd, prefix) for _ in range(3))
        try:
            epoch = await first.register_broker(broker(1))
            with pytest.raises(BrokerIdInUse, match=f"{etcd.endpoint}.*broker id 1") as taken:
                await second.register_broker(broker(1))
            # Where the holder registered, and its lease's remaining time from etcd.
            assert taken.value.holder == "127.0.0.1:9001"
            assert taken.value.expires_in_s is not None
            assert 0 < taken.value.expires_in_s <= first.lease_ttl_s
            await first.close()
            assert await third.register_broker(broker(1)) > epoch  # a new life, a new epoch
        finally:
            for store in (first, second, third):
                await store.close()

    asyncio.run(scenario())


def test_a_store_whose_lease_expired_registers_again_with_a_new_epoch(
    etcd: EtcdProcess,
) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        observer = make_store(etcd, prefix)
        # Paused past its session: the lease is never renewed and expires.
        paused = make_store(etcd, prefix, session_timeout_ms=1000, heartbeat_interval_ms=600_000)
        try:
            events = observer.watch((await observer.load()).revision)
            epoch = await paused.register_broker(broker(1))
            await next_event(events, lambda e: e.kind == "broker" and e.deleted)
            # Its first use of the dead lease says so, and nothing was written with it.
            with pytest.raises(SessionLost, match="lease is gone"):
                await paused.campaign_controller(1)
            assert paused.session_lost.is_set()
            assert (await observer.load()).controller is None
            with pytest.raises(SessionLost):
                await paused.update_registration(broker(1))
            again = await paused.register_broker(broker(1))
            assert again > epoch and not paused.session_lost.is_set()
            assert (await observer.load()).brokers[1].epoch == again
            assert await paused.campaign_controller(1) is not None
        finally:
            await paused.close()
            await observer.close()

    asyncio.run(scenario())


def test_update_registration_keeps_the_broker_epoch(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        store = make_store(etcd, prefix)
        try:
            epoch = await store.register_broker(broker(3))
            shutting_down = BrokerRegistration(3, "127.0.0.1", 9003, shutting_down=True)
            await store.update_registration(shutting_down)
            seen = (await store.load()).brokers[3]
            assert seen.shutting_down and seen.epoch == epoch
        finally:
            await store.close()

    asyncio.run(scenario())


def test_one_controller_at_a_time_and_epochs_increase(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        one, two = make_store(etcd, prefix), make_store(etcd, prefix)
        try:
            await one.register_broker(broker(1))
            await two.register_broker(broker(2))
            results = await asyncio.gather(
                one.campaign_controller(1), two.campaign_controller(2)
            )
            winners = [r for r in results if r is not None]
            assert len(winners) == 1, results
            winner, loser = (one, two) if results[0] is not None else (two, one)
            loser_id = 2 if winner is one else 1
            assert await loser.campaign_controller(loser_id) is None
            image = await loser.load()
            assert image.controller == (3 - loser_id, winners[0])
            await winner.close()
            epoch = await loser.campaign_controller(loser_id)
            assert epoch is not None and epoch > winners[0]
            assert (await loser.load()).controller == (loser_id, epoch)
        finally:
            await one.close()
            await two.close()

    asyncio.run(scenario())


def topic(name: str, partitions: int = 2) -> TopicAssignment:
    return TopicAssignment(
        name, uuid.uuid4(), tuple((1, 2, 3) for _ in range(partitions)), {"a.b": "c"}
    )


def test_partition_state_compare_and_set(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        store = make_store(etcd, unique_prefix())
        try:
            initial = PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3))
            assignment = topic("orders")
            assert await store.create_topic(assignment, {0: initial, 1: initial})
            assert not await store.create_topic(topic("orders"), {0: initial})
            image = await store.load()
            assert image.topics["orders"] == assignment
            version = image.partitions[("orders", 0)].version
            moved = initial.with_leader(2, (2, 3), controller_epoch=1)
            new_version = await store.compare_and_set_partition("orders", 0, moved, version)
            assert new_version is not None and new_version > version
            stale = initial.with_isr((1,))
            assert await store.compare_and_set_partition("orders", 0, stale, version) is None
            after = (await store.load()).partitions[("orders", 0)]
            assert (after.state, after.version) == (moved, new_version)
        finally:
            await store.close()

    asyncio.run(scenario())


def test_a_zombie_controllers_partition_write_is_refused(etcd: EtcdProcess) -> None:
    """A controller whose lease expired (paused past the session timeout) and was replaced
    cannot write a decision, even to a partition nobody touched since."""

    async def scenario() -> None:
        prefix = unique_prefix()
        zombie = make_store(etcd, prefix, session_timeout_ms=1000, heartbeat_interval_ms=600_000)
        successor = make_store(etcd, prefix)
        try:
            await zombie.register_broker(broker(1))
            await successor.register_broker(broker(2))
            old_epoch = await zombie.campaign_controller(1)
            assert old_epoch is not None
            initial = PartitionState(leader=1, leader_epoch=0, isr=(1, 2))
            assert await successor.create_topic(topic("t", 1), {0: initial})
            image = await successor.load()
            version = image.partitions[("t", 0)].version
            events = successor.watch(image.revision)
            await next_event(events, lambda e: e.kind == "controller" and e.deleted)
            new_epoch = await successor.campaign_controller(2)
            assert new_epoch is not None and new_epoch > old_epoch
            stale = initial.with_leader(1, (1,), controller_epoch=old_epoch)
            assert await zombie.compare_and_set_partition(
                "t", 0, stale, version, as_controller=(1, old_epoch)
            ) is None
            fresh = initial.with_leader(2, (2,), controller_epoch=new_epoch)
            assert await successor.compare_and_set_partition(
                "t", 0, fresh, version, as_controller=(2, new_epoch)
            ) is not None
        finally:
            await zombie.close()
            await successor.close()

    asyncio.run(scenario())


def test_producer_id_blocks_never_overlap(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        stores = [make_store(etcd, prefix) for _ in range(2)]
        try:
            firsts = await asyncio.gather(
                *(store.allocate_producer_ids(10) for store in stores for _ in range(15))
            )
            assert sorted(firsts) == list(range(0, 300, 10))
        finally:
            for store in stores:
                await store.close()

    asyncio.run(scenario())


def image_content(image: MetadataImage) -> tuple[object, ...]:
    return image.cluster_id, image.brokers, image.topics, image.partitions, image.controller


def test_watched_events_rebuild_a_fresh_load(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        observer, one, two = (make_store(etcd, prefix) for _ in range(3))
        try:
            await observer.cluster_id()
            image = await observer.load()
            events = observer.watch(image.revision)
            await one.register_broker(broker(1))
            await two.register_broker(broker(2))
            assert await one.campaign_controller(1) is not None
            state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2))
            await one.create_topic(topic("kept", 3), {i: state for i in range(3)})
            await one.create_topic(topic("kept.not", 1), {0: state})
            await one.create_topic(topic("dropped", 2), {0: state, 1: state})
            await one.update_topic(topic("kept", 3))
            assert await one.delete_topic("dropped")
            assert not await one.delete_topic("dropped")
            await two.close()  # broker 2 goes (its lease is revoked)
            version = (await one.load()).partitions[("kept", 1)].version
            last = await one.compare_and_set_partition("kept", 1, state.with_isr((1,)), version)
            assert last is not None
            async with asyncio.timeout(DEADLINE_S):
                async for event in events:
                    image.apply(event)
                    if event.revision >= last:
                        break
            fresh = await observer.load()
            assert image_content(image) == image_content(fresh)
            assert sorted(fresh.topics) == ["kept", "kept.not"] and fresh.live_brokers() == [1]
        finally:
            for store in (observer, one, two):
                await store.close()

    asyncio.run(scenario())


def test_unreachable_etcd_names_the_endpoint() -> None:
    async def scenario() -> None:
        from oncelog.harness.net import free_port

        port = free_port()
        store = EtcdMetadataStore([("127.0.0.1", port)], session_timeout_ms=1000)
        with pytest.raises(MetadataStoreError, match=f"127.0.0.1:{port}"):
            await store.load()
        await store.close()

    asyncio.run(scenario())
