"""Log compaction, per batch: what the cleaner keeps of each batch it walks (Kafka's
Cleaner.cleanInto record filter and CleanedTransactionMetadata). No I/O.

One ``BatchFilter`` walks a pass's batches in offset order, from the log start to the end
of the offset map (``cleaner.OffsetMap``), and decides for each one:

* a data record goes when a later offset of its key is in the offset map, and always when it
  has no key; records above the map's ``latest_offset`` all stay;
* every record of an aborted transaction goes: the aborted transactions come from the
  aborted-transaction index (``TxnWalk``: a transaction is ongoing-aborted for its producer
  from its first offset until its ABORT marker);
* a tombstone (null value) stays until the batch's delete horizon has passed. The first pass
  that keeps a tombstone rewrites its batch with the horizon (now + ``delete.retention.ms``)
  in the base timestamp and the delete-horizon attribute (KIP-534); a later pass after the
  horizon removes it;
* a transaction marker stays while the walk saw a batch of its transaction (a committed
  batch, or an aborted one: its ABORT marker and index entry stay until the aborted data is
  gone). Once none is left the marker's batch gets a delete horizon, and a pass after the
  horizon removes it;
* a batch that holds the last data offset of a producer still in the producer state is never
  removed whole: with no record left it is written as Kafka's empty batch (the header alone,
  offsets and sequences intact), so producer state and duplicate detection survive the
  cleaning and a replay of the log rebuilds them. A producer with no data batch left in
  its state keeps its last marker of its current epoch the same way (the epoch fences);
  and the batch ending just below the pass's first uncleanable offset stays too, so the
  last offset is not lost (Kafka's BatchRetention.RETAIN_EMPTY, Cleaner.cleanInto).

``TxnWalk.retained_aborted`` lists the aborted-transaction index entries the cleaned
segments must hold: those whose ABORT marker is kept because batches of theirs were seen.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from oncelog.errors import KafkaError
from oncelog.records.batch import ATTR_DELETE_HORIZON, BatchHeader
from oncelog.records.codec import Record, encode_retained_batch
from oncelog.records.control import ControlType, decode_control
from oncelog.storage.cleaner import OffsetMap
from oncelog.storage.txn_index import AbortedTxn

__all__ = [
    "BatchDecision",
    "BatchFilter",
    "LastRecord",
    "TxnWalk",
    "control_type",
    "delete_horizon",
]


def delete_horizon(header: BatchHeader) -> int | None:
    """The batch's delete horizon (KIP-534), or None when it has none."""
    if header.attributes & ATTR_DELETE_HORIZON:
        return header.base_timestamp
    return None


class TxnWalk:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions,
    and which markers may go, as the walk advances in offset order."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: (t.first_offset, t.last_offset))
        self._next = 0
        # producer id -> (its aborted transaction, whether a batch of it was seen)
        self._ongoing_aborted: dict[int, tuple[AbortedTxn, bool]] = {}
        self._ongoing_committed: set[int] = set()
        self.retained_aborted: list[AbortedTxn] = []

    def _consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, False))
            self._next += 1

    def on_data(self, header: BatchHeader) -> bool:
        """A data batch: whether it belongs to an aborted transaction (and so goes)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        pid = header.producer_id
        found = self._ongoing_aborted.get(pid)
        if found is not None:
            self._ongoing_aborted[pid] = (found[0], True)
            return True
        self._ongoing_committed.add(pid)
        return False

    def on_marker(self, header: BatchHeader, control: ControlType | None) -> bool:
        """A marker batch: whether it may go (no batch of its transaction was seen). A
        control batch with no record (``control`` None) was already emptied by a pass:
        it may go."""
        self._consume_up_to(header.last_offset)
        if control is None:
            return True
        pid = header.producer_id
        if control is ControlType.ABORT:
            found = self._ongoing_aborted.pop(pid, None)
            if found is not None and found[1]:
                self.retained_aborted.append(found[0])
                return False
            return True
        if control is ControlType.COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


@dataclass(frozen=True, slots=True)
class LastRecord:
    """What the producer state says of a producer still in it (Kafka's LastRecord): the
    last offset of its last data batch (None when it has none) and its epoch."""

    last_data_offset: int | None
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class BatchDecision:
    """What to write for a batch: nothing (``drop``), its bytes unchanged (``rewrite`` is
    False), or a rebuilt batch of ``records`` (maybe none: the empty batch) with
    ``delete_horizon_ms``."""

    drop: bool
    rewrite: bool
    records: Sequence[Record]
    delete_horizon_ms: int | None

    def encode(self, header: BatchHeader) -> bytes:
        """The rebuilt batch (only when ``rewrite``)."""
        return encode_retained_batch(
            header, self.records, delete_horizon_ms=self.delete_horizon_ms
        )


_DROP = BatchDecision(True, False, (), None)


class BatchFilter:
    """Decides, batch by batch in offset order, what a cleaning pass keeps (module
    docstring). ``last_records`` holds each producer id in the producer state;
    ``upper_bound`` is the pass's first uncleanable offset: the batch ending just below
    it is kept, empty if need be, so the last offset survives (Kafka's RETAIN_EMPTY)."""

    def __init__(
        self,
        offset_map: OffsetMap,
        txns: TxnWalk,
        last_records: Mapping[int, LastRecord],
        *,
        now_ms: int,
        delete_retention_ms: int,
        upper_bound: int = -1,
    ) -> None:
        self.offset_map = offset_map
        self.txns = txns
        self.last_records = last_records
        self.now_ms = now_ms
        self.delete_retention_ms = delete_retention_ms
        self.upper_bound = upper_bound

    def _retain_empty(self, header: BatchHeader) -> bool:
        """Kafka's RETAIN_EMPTY: the batch holding a producer's last data offset, or its
        last marker when it has no data batch (the epoch it carries fences), and the
        last batch below the pass's upper bound stay, if only as their header."""
        last = self.last_records.get(header.producer_id)
        if header.producer_id >= 0 and last is not None:
            if last.last_data_offset is not None:
                if header.last_offset == last.last_data_offset:
                    return True
            elif header.is_control and header.producer_epoch == last.producer_epoch:
                return True
        return header.last_offset + 1 == self.upper_bound

    def decide(self, header: BatchHeader, records: Sequence[Record]) -> BatchDecision:
        horizon = delete_horizon(header)
        if header.is_control:
            control = control_type(records)
            can_discard = self.txns.on_marker(header, control)
            discard_records = can_discard and horizon is not None and horizon <= self.now_ms
            retained: Sequence[Record] = () if discard_records else records
            needs_horizon = can_discard
        else:
            discard_records = self.txns.on_data(header)
            retained = () if discard_records else [
                r for r in records if self._retain(r, horizon)
            ]
            needs_horizon = any(r.value is None for r in retained)
        if retained:
            if needs_horizon and horizon is None:
                horizon = self.now_ms + self.delete_retention_ms
                return BatchDecision(False, True, retained, horizon)
            if len(retained) == len(records):
                return BatchDecision(False, False, records, horizon)
            return BatchDecision(False, True, retained, horizon)
        if self._retain_empty(header):
            if header.records_count == 0:
                return BatchDecision(False, False, (), horizon)
            return BatchDecision(False, True, (), None)
        return _DROP

    def _retain(self, record: Record, horizon: int | None) -> bool:
        offset_map = self.offset_map
        if record.offset > offset_map.latest_offset:
            return True
        if record.key is None:
            return False
        if record.offset < offset_map.get(record.key):
            return False
        if record.value is not None:
            return True
        return horizon is None or self.now_ms < horizon


def control_type(records: Sequence[Record]) -> ControlType | None:
    """The marker type of a control batch's records; None when they hold no marker."""
    if not records:
        return None
    try:
        return decode_control(records[0])[0]
    except KafkaError:
        return None
