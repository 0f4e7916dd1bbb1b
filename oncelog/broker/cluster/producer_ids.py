"""``ClusterProducerIdManager``: producer ids in cluster mode, in blocks handed out by the
metadata store (KIP-98's "producer id blocks from the consensus service"; Kafka's
RPCProducerIdManager, which asks the controller instead).

``next_id()`` is synchronous, as the transaction coordinator calls it (the same interface as
the single node's file-backed ``oncelog.coordinator.producer_ids.ProducerIdManager``). Blocks
of ``block_size`` ids come from ``MetadataStore.allocate_producer_ids``, which never gives
two brokers overlapping ranges. ``run()`` (a task of the broker's TaskGroup) fetches a block
whenever one is wanted: at start, and again once 90 % of the current block has been handed
out, so the next block is normally ready before the current one runs out. When it is not,
``next_id()`` raises COORDINATOR_LOAD_IN_PROGRESS, which clients retry (Kafka answers the
same, "Producer ID block is full. Waiting for next block"). A failed fetch is logged and
retried after ``retry_backoff_s``. Ids of a block not handed out before a restart are never
used again: the store has moved past them.
"""

from __future__ import annotations

import asyncio
import logging

from oncelog.cluster.metadata import MetadataStore, MetadataStoreError
from oncelog.errors import ErrorCode, KafkaError

__all__ = ["PREFETCH_THRESHOLD", "ClusterProducerIdManager"]

logger = logging.getLogger(__name__)

PREFETCH_THRESHOLD = 0.90  # share of a block handed out when the next one is asked for


class ClusterProducerIdManager:
    """Hands out producer ids from blocks reserved in the metadata store."""

    def __init__(
        self, store: MetadataStore, *, block_size: int = 1000, retry_backoff_s: float = 0.05
    ) -> None:
        if block_size < 1:
            raise ValueError("block_size must be positive")
        self.store = store
        self.block_size = block_size
        self.retry_backoff_s = retry_backoff_s
        self._start = self._next = self._end = 0  # the current block: [start, end), next
        self._next_block: int | None = None  # the first id of a fetched, unused block
        self._wanted = asyncio.Event()
        self._wanted.set()  # the first block is fetched as soon as run() starts
        self._ready = asyncio.Event()

    def next_id(self) -> int:
        """A producer id no broker has handed out; KafkaError(COORDINATOR_LOAD_IN_PROGRESS)
        while no block is ready."""
        if self._next >= self._end:
            if self._next_block is None:
                self._wanted.set()
                raise KafkaError(
                    ErrorCode.coordinator_load_in_progress,
                    "Producer ID block is full. Waiting for next block",
                )
            self._start = self._next = self._next_block
            self._end = self._start + self.block_size
            self._next_block = None
        pid = self._next
        self._next += 1
        if pid == self._start + int(self.block_size * PREFETCH_THRESHOLD):
            self._wanted.set()
        return pid

    @property
    def current_block(self) -> tuple[int, int]:
        """[next, end) of the current block: what is left to hand out from it."""
        return self._next, self._end

    @property
    def next_block_ready(self) -> bool:
        return self._next_block is not None

    async def wait_ready(self) -> None:
        """Wait until the first block has been fetched."""
        await self._ready.wait()

    async def run(self) -> None:
        """Fetch a block whenever one is wanted and none is waiting; runs until cancelled."""
        while True:
            await self._wanted.wait()
            if self._next_block is not None:
                self._wanted.clear()
                continue
            try:
                first = await self.store.allocate_producer_ids(self.block_size)
            except MetadataStoreError as exc:
                logger.warning("producer id block fetch failed: %s; retrying in %.2fs",
                               exc, self.retry_backoff_s)
                await asyncio.sleep(self.retry_backoff_s)
                continue
            self._next_block = first
            self._wanted.clear()
            self._ready.set()
            logger.info("producer id block [%d, %d) ready", first, first + self.block_size)
