"""``ClusterProducerIdManager`` over an in-memory store whose allocations the test releases
one by one: the first block at start, the prefetch at 90 %, COORDINATOR_LOAD_IN_PROGRESS
while no block is ready, and a retry after a failed fetch."""

from __future__ import annotations

import asyncio

import pytest

from oncelog.broker.cluster.producer_ids import ClusterProducerIdManager
from oncelog.cluster.metadata import MetadataStoreError
from oncelog.errors import ErrorCode, KafkaError


class GatedStore:
    """allocate_producer_ids waits for the test to release each call (or fail it)."""

    def __init__(self) -> None:
        self.next = 0
        self.calls = 0
        self.pending: asyncio.Queue[asyncio.Future[None]] = asyncio.Queue()

    async def allocate_producer_ids(self, count: int) -> int:
        self.calls += 1
        gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self.pending.put(gate)
        await gate
        first, self.next = self.next, self.next + count
        return first

    async def release(self, error: Exception | None = None) -> None:
        gate = await asyncio.wait_for(self.pending.get(), 5)
        if error is None:
            gate.set_result(None)
        else:
            gate.set_exception(error)


async def settle(manager: ClusterProducerIdManager, ready: bool) -> None:
    async with asyncio.timeout(5):
        while manager.next_block_ready != ready:
            await asyncio.sleep(0)


def test_blocks_are_prefetched_at_90_percent_and_missing_blocks_are_retriable() -> None:
    async def scenario() -> None:
        store = GatedStore()
        manager = ClusterProducerIdManager(store, block_size=10, retry_backoff_s=0)  # type: ignore[arg-type]
        with pytest.raises(KafkaError) as raised:
            manager.next_id()  # nothing fetched yet
        assert raised.value.code is ErrorCode.coordinator_load_in_progress
        task = asyncio.create_task(manager.run())
        try:
            await store.release()
            await manager.wait_ready()
            assert [manager.next_id() for _ in range(9)] == list(range(9))
            for _ in range(10):
                await asyncio.sleep(0)  # give run() every chance to fetch (it must not)
            assert store.calls == 1 and store.pending.empty()  # id 8 is 80 %: no prefetch
            assert manager.next_id() == 9  # 90 %: the next block is asked for
            await store.release(MetadataStoreError("etcd at x:1: down"))  # fails: retried
            with pytest.raises(KafkaError) as raised:
                manager.next_id()  # the block is used up and the next is not there yet
            assert raised.value.code is ErrorCode.coordinator_load_in_progress
            await store.release()
            await settle(manager, ready=True)
            assert store.calls == 3
            assert manager.next_id() == 10 and manager.current_block == (11, 20)
        finally:
            task.cancel()

    asyncio.run(scenario())
