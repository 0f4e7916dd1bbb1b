"""The default partitioner, compatible with Kafka's Java client and librdkafka's murmur2.

Keyed records go to ``toPositive(murmur2(key)) % numPartitions`` over *all* partitions of
the topic, so the same key lands on the same partition whichever of those clients wrote it
(confluent-kafka needs ``partitioner: murmur2_random`` for that; its default is crc32).
Records without a key are "sticky" (KIP-480/KIP-794): they go to one partition until
``batch.size`` bytes have been sent there, then to another, picked at random.
"""

from __future__ import annotations

import random
from collections.abc import Callable

__all__ = ["StickyPartitioner", "murmur2", "partition_for_key", "to_positive"]

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: 32-bit MurmurHash2 with seed 0x9747b28c, as a signed int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    full = length & ~3
    for i in range(0, full, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[full + 2] << 16
    if rest >= 2:
        h ^= data[full + 1] << 8
    if rest >= 1:
        h ^= data[full]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not abs)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Chooses partitions for a producer: murmur2 for keys, sticky for null keys.

    ``on_append(topic, partition, size)`` tells it how many bytes went to the sticky
    partition so it can move on after ``batch_size`` bytes.
    """

    def __init__(
        self,
        batch_size: int,
        *,
        ignore_keys: bool = False,
        rng: Callable[[int], int] | None = None,
    ) -> None:
        self._batch_size = max(1, batch_size)
        self._ignore_keys = ignore_keys
        self._rng = rng or (lambda n: random.randrange(n))
        self._sticky: dict[str, tuple[int, int]] = {}  # topic -> (partition, bytes sent)

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if num_partitions <= 0:
            raise ValueError(f"topic {topic} has no partitions")
        if key is not None and not self._ignore_keys:
            return partition_for_key(key, num_partitions)
        current = self._sticky.get(topic)
        if current is None or current[0] >= num_partitions:
            current = (self._next(topic, num_partitions, None), 0)
            self._sticky[topic] = current
        return current[0]

    def on_append(self, topic: str, partition: int, size: int, num_partitions: int) -> None:
        current = self._sticky.get(topic)
        if current is None or current[0] != partition:
            return
        sent = current[1] + size
        if sent >= self._batch_size:
            self._sticky[topic] = (self._next(topic, num_partitions, partition), 0)
        else:
            self._sticky[topic] = (partition, sent)

    def _next(self, topic: str, num_partitions: int, previous: int | None) -> int:
        if num_partitions == 1:
            return 0
        choice = self._rng(num_partitions)
        if choice == previous:
            choice = (choice + 1) % num_partitions
        return choice
