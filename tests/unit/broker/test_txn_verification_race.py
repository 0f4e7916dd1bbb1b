"""KIP-890's verification guard against the race that left a TxnOffsetCommit pending forever
on a cluster (``oncelog verify --spawn cluster``, seed 15): the partition leader asks the
transaction coordinator on another broker whether the partition is in the producer's
transaction; while the answer travels, the transaction ends and its marker is written to
the partition; the coordinator's answer (NONE, given before the end) arrives; appending
then would open a transaction on the partition that no marker will ever end (the offsets
stay UNSTABLE_OFFSET_COMMIT, the LSO of a data partition stays put).

With the guard the append is refused with INVALID_TXN_STATE (Kafka's "Record was not part
of an ongoing transaction"), on the produce path and on the group coordinator's
TxnOffsetCommit append alike, and the partition has no open transaction. Deterministic: the
fake verifier writes the marker itself before it answers."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest

from oncelog.broker.api import RequestContext
from oncelog.broker.api import group as group_api
from oncelog.broker.api import produce as produce_api
from oncelog.broker.context import BrokerContext, NodeIdentity
from oncelog.broker.internal_topic_store import InternalTopicStore
from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.errors import ErrorCode
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.records.codec import RecordInput, encode_batch
from tests.support.fake_cluster_view import ME, OTHER, FakeClusterView

TXN_ID = "tx-2"
PID, EPOCH = 2000, 2711
GROUP = "verify-group"
OFFSET_PARTITIONS = 3
TP = tuple[str, int]


@dataclasses.dataclass
class RacingVerifier:
    """The transaction coordinator on another broker. Its answer is NONE (the partition was
    in the transaction when it looked); ``before_answer`` runs first: the transaction's
    marker landing on the partition while the answer is on its way."""

    before_answer: Callable[[], None] = lambda: None
    calls: int = 0

    async def add_or_verify(self, coordinator: int, transactional_id: str, producer_id: int,
                            producer_epoch: int, partitions: list[TP], *, verify_only: bool
                            ) -> dict[TP, ErrorCode]:
        self.calls += 1
        self.before_answer()
        return dict.fromkeys(partitions, ErrorCode.none)


@dataclasses.dataclass
class Broker:
    registry: PartitionRegistry
    groups: GroupCoordinator
    verifier: RacingVerifier
    svc: BrokerContext

    def context(self, api_key: int, version: int) -> RequestContext:
        return RequestContext(api_key, version, 1, "test", "127.0.0.1", self.svc)


def new_broker(tmp_path: Path) -> Broker:
    clock = FakeClock()
    config = BrokerConfig({"offsets.topic.num.partitions": str(OFFSET_PARTITIONS)})
    registry = PartitionRegistry(tmp_path, config, clock)
    registry.load()
    registry.create_topic("t", 1)
    registry.ensure_internal_topic(OFFSETS_TOPIC, OFFSET_PARTITIONS, {})
    groups = GroupCoordinator(config, InternalTopicStore(registry, OFFSETS_TOPIC, clock), clock)
    groups.load()
    # Groups are coordinated here; the transactional id's coordinator is another broker.
    view = FakeClusterView(
        coordinator_leader=ME, txn_coordinator_leader=OTHER,
        coordinator_partitions={OFFSETS_TOPIC: OFFSET_PARTITIONS, TRANSACTION_STATE_TOPIC: 50},
    )
    view.lead("t", 0, ME)
    verifier = RacingVerifier()
    svc = BrokerContext(
        config=config, clock=clock, node=NodeIdentity(ME, "c", "localhost", 9092),
        partitions=registry, groups=groups, transactions=cast(Any, None),
        producer_ids=cast(Any, None), cluster=view, txn_verifier=cast(Any, verifier),
    )
    return Broker(registry, groups, verifier, svc)


def run(call: Awaitable[Any]) -> Any:
    async def main() -> Any:
        return await call

    return asyncio.run(main())


# -- produce ------------------------------------------------------------------------------


def send_produce(broker: Broker, version: int, seq: int = 0) -> Any:
    mod = request_module(versions.PRODUCE, version)
    data = encode_batch([RecordInput(key=b"k", value=b"v")], producer_id=PID,
                        producer_epoch=EPOCH, base_sequence=seq, transactional=True)
    request = make(
        mod.ProduceRequest, transactional_id=TXN_ID, acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(make(mod.TopicProduceData, name="t", partition_data=(
            make(mod.PartitionProduceData, index=0, records=data),)),),
    )
    response = run(produce_api.handle_produce(broker.context(versions.PRODUCE, version),
                                              request))
    ((answer,),) = [t.partition_responses for t in response.responses]
    return answer


@pytest.mark.parametrize("version", [9, 12])
def test_a_marker_during_verification_refuses_the_produce(tmp_path: Path, version: int) -> None:
    broker = new_broker(tmp_path)
    partition = broker.registry.get("t", 0)

    def abort() -> None:
        partition.append_marker(PID, EPOCH, 0, commit=False)

    broker.verifier.before_answer = abort
    answer = send_produce(broker, version)
    assert answer.error_code == ErrorCode.invalid_txn_state
    # Nothing was appended after the marker: no transaction is left open, the LSO is free.
    assert not partition.has_open_transaction(PID)
    assert partition.last_stable_offset == partition.log_end_offset == 1
    # The producer's retry is verified afresh (no marker this time) and appended.
    broker.verifier.before_answer = lambda: None
    assert send_produce(broker, version).error_code == ErrorCode.none
    assert partition.has_open_transaction(PID)
    broker.registry.close()


def test_an_open_transaction_needs_no_guard_for_its_next_batches(tmp_path: Path) -> None:
    broker = new_broker(tmp_path)
    partition = broker.registry.get("t", 0)
    assert send_produce(broker, 9).error_code == ErrorCode.none
    # Its transaction is open here at this epoch: no guard is taken for the next batch.
    assert partition.maybe_start_transaction_verification(PID, EPOCH).value == 0
    assert send_produce(broker, 9, seq=1).error_code == ErrorCode.none
    # The marker ends it: the next batch of the same epoch must be verified again.
    partition.append_marker(PID, EPOCH, 0, commit=True)
    assert partition.maybe_start_transaction_verification(PID, EPOCH).value != 0
    broker.registry.close()


# -- TxnOffsetCommit ------------------------------------------------------------------------


def txn_offset_commit(broker: Broker, version: int) -> ErrorCode:
    mod = request_module(versions.TXN_OFFSET_COMMIT, version)
    request = make(
        mod.TxnOffsetCommitRequest, transactional_id=TXN_ID, group_id=GROUP,
        producer_id=PID, producer_epoch=EPOCH, generation_id=-1, member_id="",
        group_instance_id=None,
        topics=(make(mod.TxnOffsetCommitRequestTopic, name="t", partitions=(
            make(mod.TxnOffsetCommitRequestPartition, partition_index=0, committed_offset=42,
                 committed_leader_epoch=-1, committed_metadata=""),)),),
    )
    ctx = broker.context(versions.TXN_OFFSET_COMMIT, version)
    response = run(group_api.handle_txn_offset_commit(ctx, request))
    ((answer,),) = [t.partitions for t in response.topics]
    return ErrorCode(answer.error_code)


def stable_offset(broker: Broker) -> Any:
    """OffsetFetch with require_stable for t-0: UNSTABLE_OFFSET_COMMIT while offsets of an
    open transaction are pending."""
    return broker.groups.fetch_offsets(GROUP, [("t", 0)], True)[("t", 0)]


def abort_marker(broker: Broker) -> Callable[[], None]:
    """The transaction's ABORT marker written to the group's offsets partition, as the
    broker's marker writer does (the append, then the group coordinator is told)."""
    index = broker.groups.partition_for(GROUP)

    def write() -> None:
        broker.registry.get(OFFSETS_TOPIC, index).append_marker(PID, EPOCH, 0, commit=False)
        broker.groups.on_txn_marker(index, PID, False, EPOCH)

    return write


@pytest.mark.parametrize("version", [3, 5])
def test_a_marker_during_verification_refuses_the_txn_offset_commit(
    tmp_path: Path, version: int
) -> None:
    broker = new_broker(tmp_path)
    offsets = broker.registry.get(OFFSETS_TOPIC, broker.groups.partition_for(GROUP))
    broker.verifier.before_answer = abort_marker(broker)
    assert txn_offset_commit(broker, version) == ErrorCode.invalid_txn_state
    assert broker.verifier.calls == 1
    # No offsets are left pending: OffsetFetch is stable, the partition has no open
    # transaction (before the guard: UNSTABLE_OFFSET_COMMIT for the rest of the run).
    assert stable_offset(broker).error == ErrorCode.none
    assert not offsets.has_open_transaction(PID)
    # A retry after the abort is verified afresh and appended; its marker settles it.
    broker.verifier.before_answer = lambda: None
    assert txn_offset_commit(broker, version) == ErrorCode.none
    assert stable_offset(broker).error == ErrorCode.unstable_offset_commit
    offsets.append_marker(PID, EPOCH, 0, commit=True)
    broker.groups.on_txn_marker(offsets.index, PID, True, EPOCH)
    assert (stable_offset(broker).error, stable_offset(broker).offset) == (ErrorCode.none, 42)
    broker.registry.close()


def test_txn_offset_commit_of_a_fenced_epoch_is_refused_before_asking(tmp_path: Path) -> None:
    """A marker of a newer epoch (a fencing abort) is on the offsets partition: the
    guard is refused with INVALID_PRODUCER_EPOCH and the coordinator is not asked."""
    broker = new_broker(tmp_path)
    offsets = broker.registry.get(OFFSETS_TOPIC, broker.groups.partition_for(GROUP))
    offsets.append_marker(PID, EPOCH + 1, 0, commit=False)
    assert txn_offset_commit(broker, 3) == ErrorCode.invalid_producer_epoch
    assert broker.verifier.calls == 0
    broker.registry.close()
