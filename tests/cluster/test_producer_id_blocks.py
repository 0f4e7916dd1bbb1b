"""Producer ids in cluster mode against a real etcd: two brokers' managers hand out ids
from blocks the store reserves, and no id is handed out twice."""

from __future__ import annotations

import asyncio

from test_metadata_store import make_store

from oncelog.broker.cluster.producer_ids import ClusterProducerIdManager
from oncelog.errors import ErrorCode, KafkaError
from oncelog.harness.etcd import EtcdProcess, unique_prefix


async def take_ids(manager: ClusterProducerIdManager, count: int) -> list[int]:
    """``count`` ids, retrying COORDINATOR_LOAD_IN_PROGRESS as a client would."""
    ids: list[int] = []
    async with asyncio.timeout(20):
        while len(ids) < count:
            try:
                ids.append(manager.next_id())
            except KafkaError as exc:
                assert exc.code is ErrorCode.coordinator_load_in_progress
                await asyncio.sleep(0.005)  # a client's retry backoff
            await asyncio.sleep(0)  # let the other broker and the fetches run
    return ids


def test_two_brokers_never_hand_out_the_same_producer_id(etcd: EtcdProcess) -> None:
    async def scenario() -> None:
        prefix = unique_prefix()
        stores = [make_store(etcd, prefix) for _ in range(2)]
        managers = [ClusterProducerIdManager(store, block_size=10) for store in stores]
        try:
            async with asyncio.TaskGroup() as tasks:
                runs = [tasks.create_task(manager.run()) for manager in managers]
                taken = await asyncio.gather(*(take_ids(m, 45) for m in managers))
                for run in runs:
                    run.cancel()
            every = taken[0] + taken[1]
            assert len(set(every)) == len(every) == 90
            assert all(ids == sorted(ids) for ids in taken)
        finally:
            for store in stores:
                await store.close()

    asyncio.run(scenario())
