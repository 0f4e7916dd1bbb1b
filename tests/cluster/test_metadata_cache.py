"""``MetadataCache`` against a real etcd: it follows the store's changes, tells listeners
and waiters, and when the watch breaks (etcd killed and restarted) it reloads and goes on."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_metadata_store import broker, make_store, topic

from oncelog.broker.cluster.metadata_cache import MetadataCache
from oncelog.cluster.metadata import MetadataEvent, MetadataImage, PartitionState
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.harness.etcd import EtcdProcess, start_etcd, unique_prefix

DEADLINE_S = 20.0


def test_the_cache_follows_the_store(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        store, other = make_store(etcd, prefix), make_store(etcd, prefix)
        cache = MetadataCache(store)
        seen: list[tuple[str, bool]] = []

        def listener(event: MetadataEvent | None, image: MetadataImage) -> None:
            assert event is not None and image is cache.image
            seen.append((event.kind, event.deleted))

        cache.subscribe(listener)
        image = await cache.load()
        async with asyncio.TaskGroup() as tasks:
            follower = tasks.create_task(cache.follow())
            await other.register_broker(broker(2))
            await cache.wait_for(lambda i: 2 in i.brokers, timeout=DEADLINE_S)
            state = PartitionState(leader=2, leader_epoch=0, isr=(2,))
            await other.create_topic(topic("t", 1), {0: state})
            await cache.wait_for(lambda i: i.leader("t", 0) == 2, timeout=DEADLINE_S)
            await other.close()
            await cache.wait_for(lambda i: not i.brokers, timeout=DEADLINE_S)
            assert image is cache.image
            assert seen == [("broker", False), ("topic", False), ("partition", False),
                            ("broker", True)]
            await store.close()  # the watch ends with the store: follow() returns
        assert follower.done() and cache.reloads == 0

    asyncio.run(scenario())


def test_a_broken_watch_is_followed_by_a_reload(tmp_path: Path) -> None:
    etcd = start_etcd(tmp_path)
    try:
        asyncio.run(_reload_scenario(etcd))
    finally:
        etcd.kill()


async def _reload_scenario(etcd: EtcdProcess) -> None:
    prefix = unique_prefix()
    store = make_store(etcd, prefix)
    cache = MetadataCache(store, retry_backoff_s=0.1)
    reloaded = asyncio.Event()
    cache.subscribe(lambda event, _image: reloaded.set() if event is None else None)
    await cache.load()
    async with asyncio.TaskGroup() as tasks:
        tasks.create_task(cache.follow())
        first = make_store(etcd, prefix)
        await first.register_broker(broker(3))
        await cache.wait_for(lambda i: 3 in i.brokers, timeout=DEADLINE_S)  # watching
        etcd.kill()  # the watch stream breaks
        etcd.start()  # same ports, same data
        writer: EtcdMetadataStore = make_store(etcd, prefix)
        await writer.register_broker(broker(4))
        await cache.wait_for(lambda i: 4 in i.brokers, timeout=DEADLINE_S)
        async with asyncio.timeout(DEADLINE_S):
            await reloaded.wait()
        assert cache.reloads >= 1
        await writer.close()
        await cache.wait_for(lambda i: 4 not in i.brokers, timeout=DEADLINE_S)
        await first.close()
        await store.close()
