"""Offset arithmetic of the reader: pure functions over {(topic, partition): offset}.

An offset here is a Kafka position (the next offset to read), as in Spark's Kafka source.
A micro-batch reads, per partition, the half-open range ``[start, end)``; under
read_committed ``end`` is at most the partition's LSO, so every offset below it is decided
and a read_committed fetch reaches ``end`` (skipping aborted data and control records: the
range counts offsets, not records).

Spark keeps a streaming source's offsets as JSON-able dicts; the form is Spark's Kafka one,
``{"topic": {"0": 42, "1": 7}}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oncelog.spark.options import EARLIEST, LATEST

__all__ = [
    "DataLoss",
    "OffsetRange",
    "Offsets",
    "TopicPartitionKey",
    "available",
    "data_loss",
    "from_json",
    "plan_ranges",
    "rate_limit",
    "resolve",
    "to_json",
]

TopicPartitionKey = tuple[str, int]
Offsets = dict[TopicPartitionKey, int]


def to_json(offsets: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {
        (str(topic), int(part)): int(offset)
        for topic, parts in data.items()
        for part, offset in parts.items()
    }


def resolve(
    spec: str | Mapping[TopicPartitionKey, int],
    partitions: Iterable[TopicPartitionKey],
    earliest: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    *,
    default: int = EARLIEST,
) -> Offsets:
    """Concrete offsets for ``partitions`` from ``startingOffsets`` / ``endingOffsets``:
    ``earliest``, ``latest`` or per partition (-2 earliest, -1 latest); a partition that the
    JSON does not name gets ``default``."""
    out: Offsets = {}
    for tp in partitions:
        if isinstance(spec, str):
            wanted = EARLIEST if spec == "earliest" else LATEST
        else:
            wanted = spec.get(tp, default)
        if wanted == EARLIEST:
            out[tp] = earliest[tp]
        elif wanted == LATEST:
            out[tp] = latest[tp]
        else:
            out[tp] = wanted
    return out


def available(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]) -> int:
    """How many offsets lie between ``start`` and ``end`` (partitions absent from ``start``
    count from 0)."""
    return sum(max(0, until - start.get(tp, 0)) for tp, until in end.items())


def rate_limit(
    start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int], limit: int
) -> Offsets:
    """End offsets that advance at most ``limit`` offsets in total beyond ``start``, shared
    between partitions in proportion to what each has waiting.

    Shares are rounded down and the offsets left over go to the partitions with the largest
    remainders (ties to the lowest topic-partition), so the total is exactly
    ``min(limit, available)`` and every partition with data waiting gets at least one
    offset when ``limit`` allows. No partition passes its ``latest``."""
    if limit <= 0:
        raise ValueError(f"limit must be positive, not {limit}")
    sizes = {tp: max(0, until - start.get(tp, 0)) for tp, until in latest.items()}
    total = sum(sizes.values())
    if total <= limit:
        return dict(latest)
    waiting = sorted(tp for tp, size in sizes.items() if size > 0)
    grant = {tp: 0 for tp in latest}
    if limit >= len(waiting):
        # Largest remainder: floor of each exact share, leftovers to the largest remainders.
        remainders: list[tuple[int, TopicPartitionKey]] = []
        for tp in waiting:
            grant[tp], remainder = divmod(limit * sizes[tp], total)
            remainders.append((remainder, tp))
        left = limit - sum(grant.values())
        for _, tp in sorted(remainders, key=lambda item: (-item[0], item[1]))[:left]:
            grant[tp] += 1
        # No partition with data waiting is starved: take from the largest grants.
        for tp in waiting:
            if grant[tp] == 0:
                donor = max(waiting, key=lambda d: (grant[d], d))
                grant[donor] -= 1
                grant[tp] = 1
    else:
        # Fewer offsets than partitions waiting: the largest backlogs go first.
        for tp in sorted(waiting, key=lambda tp: (-sizes[tp], tp))[:limit]:
            grant[tp] = 1
    return {tp: start.get(tp, 0) + min(grant[tp], sizes[tp]) for tp in latest}


@dataclass(frozen=True)
class OffsetRange:
    """What one Spark task reads: offsets ``[start, end)`` of one partition."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise ValueError(f"bad offset range {self}")

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    start: Mapping[TopicPartitionKey, int],
    end: Mapping[TopicPartitionKey, int],
    min_partitions: int | None = None,
) -> list[OffsetRange]:
    """One range per partition with offsets to read, in topic-partition order; with
    ``min_partitions`` larger than that, the biggest ranges are split into near-equal
    pieces (in proportion to their size) until there are at least that many, as far as
    single offsets allow."""
    ranges = [
        OffsetRange(tp[0], tp[1], start.get(tp, 0), until)
        for tp, until in sorted(end.items())
        if until > start.get(tp, 0)
    ]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = max(1, min(r.size, round(min_partitions * r.size / total)))
        step, extra = divmod(r.size, pieces)
        offset = r.start
        for i in range(pieces):
            length = step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, offset, offset + length))
            offset += length
    return out


@dataclass(frozen=True)
class DataLoss:
    """Offsets the query meant to read that are gone."""

    topic: str
    partition: int
    wanted: int
    earliest: int | None  # None: the partition itself is gone

    def __str__(self) -> str:
        if self.earliest is None:
            return f"{self.topic}-{self.partition} no longer exists (was at offset {self.wanted})"
        return (
            f"{self.topic}-{self.partition}: offsets {self.wanted}..{self.earliest - 1} are gone "
            f"(the log now starts at {self.earliest})"
        )


def data_loss(
    start: Mapping[TopicPartitionKey, int],
    earliest: Mapping[TopicPartitionKey, int],
) -> list[DataLoss]:
    """Partitions in ``start`` that vanished, or whose log now begins after ``start``."""
    lost: list[DataLoss] = []
    for tp, offset in sorted(start.items()):
        if tp not in earliest:
            lost.append(DataLoss(tp[0], tp[1], offset, None))
        elif earliest[tp] > offset:
            lost.append(DataLoss(tp[0], tp[1], offset, earliest[tp]))
    return lost
