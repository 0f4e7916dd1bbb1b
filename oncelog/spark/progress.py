"""The exactly-once sink's identities and progress records. Pure: no I/O.

Every Spark partition ``p`` of a streaming query ``q`` writes through one transactional id,
``{prefix}-{q}-{p}``: the same in every task attempt and every run of the query (the query id
is kept in the checkpoint), so a new attempt's InitProducerId fences the previous one.

Progress is kept where the transaction can write it atomically with the data: as an offset
of a consumer group that nobody joins, ``{prefix}-{q}``, committed with
``send_offsets_to_transaction`` in the same transaction as the partition's output. Its key
is the partition of the pseudo topic ``oncelog-spark-progress``, its offset the batch id,
its metadata a small JSON note. The group coordinator makes those offsets visible exactly
when the transaction's COMMIT marker is written and drops them on ABORT, and an OffsetFetch
with RequireStable waits only while *that key* has a pending transaction, so reading one
partition's progress never waits on another partition's transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

__all__ = [
    "PROGRESS_TOPIC",
    "Progress",
    "progress_group",
    "query_id_from_metadata",
    "transactional_id",
    "txn_id_partition",
]

PROGRESS_TOPIC = "oncelog-spark-progress"
_FORMAT = 1


def transactional_id(prefix: str, query_id: str, partition: int) -> str:
    if partition < 0:
        raise ValueError(f"partition must be >= 0, not {partition}")
    if not query_id:
        raise ValueError("query id is empty")
    return f"{prefix}-{query_id}-{partition}"


def txn_id_partition(prefix: str, query_id: str, txn_id: str) -> int | None:
    """The partition of one of this query's transactional ids, or None if ``txn_id`` is not
    one of them."""
    head = f"{prefix}-{query_id}-"
    if not txn_id.startswith(head):
        return None
    tail = txn_id[len(head) :]
    return int(tail) if tail.isdigit() else None


def progress_group(prefix: str, query_id: str) -> str:
    return f"{prefix}-{query_id}"


@dataclass(frozen=True)
class Progress:
    """The last batch whose output of one partition is committed."""

    batch_id: int
    query_id: str
    partition: int

    def offset(self) -> int:
        """The group offset that carries it."""
        return self.batch_id

    def metadata(self) -> str:
        return json.dumps(
            {
                "v": _FORMAT,
                "query": self.query_id,
                "partition": self.partition,
                "batch": self.batch_id,
            },
            separators=(",", ":"),
        )

    @classmethod
    def parse(cls, offset: int, metadata: str, *, query_id: str, partition: int) -> Progress:
        """The progress read back from a committed group offset; the note must name this
        query and partition (anything else is a foreign or corrupt record)."""
        try:
            note = json.loads(metadata)
        except json.JSONDecodeError:
            raise ValueError(f"progress metadata is not JSON: {metadata!r}") from None
        if (
            not isinstance(note, dict)
            or note.get("v") != _FORMAT
            or note.get("query") != query_id
            or note.get("partition") != partition
            or note.get("batch") != offset
        ):
            raise ValueError(
                f"progress of {query_id}/{partition} does not match: offset {offset}, {metadata!r}"
            )
        return cls(offset, query_id, partition)

    def covers(self, batch_id: int) -> bool:
        """Is ``batch_id``'s output of this partition already committed?"""
        return self.batch_id >= batch_id


def query_id_from_metadata(text: str) -> str:
    """The query id in a checkpoint's ``metadata`` file (``{"id":"<uuid>"}``)."""
    try:
        data = json.loads(text.strip().splitlines()[0]) if text.strip() else None
    except json.JSONDecodeError:
        data = None
    if not isinstance(data, dict) or not isinstance(data.get("id"), str) or not data["id"]:
        raise ValueError(f"not a streaming checkpoint's metadata: {text[:200]!r}")
    return str(data["id"])
