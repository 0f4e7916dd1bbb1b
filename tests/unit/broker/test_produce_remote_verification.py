"""Transactional produce in a cluster: the partition leader verifies the batch with the
coordinator of the transactional id, which may be another broker (Kafka's
AddPartitionsToTxnManager sends it AddPartitionsToTxn v4+), never with its own coordinator
for an id that coordinator does not own. A coordinator that is not there (moving, not
reachable) is NOT_ENOUGH_REPLICAS, which producers retry (Kafka's ReplicaManager)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from pathlib import Path
from typing import Any, cast

import pytest

from oncelog.broker.api import RequestContext, produce
from oncelog.broker.cluster_view import NO_LEADER
from oncelog.broker.context import BrokerContext, NodeIdentity
from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.records.codec import RecordInput, encode_batch
from tests.support.fake_cluster_view import ME, OTHER, FakeClusterView

TXN_ID = "payments-app"
TP = tuple[str, int]


class NotOwningCoordinator:
    """This broker's transaction coordinator, which does not own ``TXN_ID``: asked, it
    answers NOT_COORDINATOR (as TransactionCoordinator does for a partition not loaded)."""

    def __init__(self) -> None:
        self.asked = 0

    def verify_partitions(self, *_: Any) -> dict[TP, ErrorCode]:
        self.asked += 1
        return {("t", 0): ErrorCode.not_coordinator}

    async def handle_add_partitions(self, *_: Any) -> dict[TP, ErrorCode]:
        self.asked += 1
        return {("t", 0): ErrorCode.not_coordinator}


@dataclasses.dataclass
class FakeVerifier:
    answer: ErrorCode = ErrorCode.none
    calls: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)

    async def add_or_verify(self, coordinator: int, transactional_id: str, producer_id: int,
                            producer_epoch: int, partitions: list[TP], *, verify_only: bool
                            ) -> dict[TP, ErrorCode]:
        self.calls.append((coordinator, transactional_id, producer_id, producer_epoch,
                           partitions, verify_only))
        return dict.fromkeys(partitions, self.answer)


def produce_once(tmp_path: Path, version: int, coordinator: int, verifier: FakeVerifier
                 ) -> tuple[Any, NotOwningCoordinator]:
    clock = FakeClock()
    config = BrokerConfig()
    registry = PartitionRegistry(tmp_path, config, clock)
    registry.load()
    registry.create_topic("t", 1)
    view = FakeClusterView(coordinator_leader=coordinator)
    view.lead("t", 0, ME)
    local = NotOwningCoordinator()
    svc = BrokerContext(
        config=config, clock=clock, node=NodeIdentity(ME, "c", "localhost", 9092),
        partitions=registry, groups=cast(Any, None), transactions=cast(Any, local),
        producer_ids=cast(Any, None), cluster=view, txn_verifier=cast(Any, verifier),
    )
    mod = request_module(versions.PRODUCE, version)
    data = encode_batch([RecordInput(key=b"k", value=b"v")], producer_id=7, producer_epoch=2,
                        base_sequence=0, transactional=True)
    request = make(
        mod.ProduceRequest, transactional_id=TXN_ID, acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(make(mod.TopicProduceData, name="t", partition_data=(
            make(mod.PartitionProduceData, index=0, records=data),)),),
    )
    ctx = RequestContext(versions.PRODUCE, version, 1, "test", "127.0.0.1", svc)

    async def send() -> Any:
        return await produce.handle_produce(ctx, request)

    response = asyncio.run(send())
    (topic,) = response.responses
    (answer,) = topic.partition_responses
    registry.close()
    return answer, local


@pytest.mark.parametrize("version", [9, 12])
def test_a_coordinator_on_another_broker_is_asked(tmp_path: Path, version: int) -> None:
    verifier = FakeVerifier()
    answer, local = produce_once(tmp_path, version, OTHER, verifier)
    assert answer.error_code == ErrorCode.none and answer.base_offset == 0
    # Verify-only below Produce v12; v12 (KIP-890 part 2) adds the partition.
    assert verifier.calls == [(OTHER, TXN_ID, 7, 2, [("t", 0)], version < 12)]
    assert local.asked == 0


@pytest.mark.parametrize("refusal", [ErrorCode.network_exception, ErrorCode.not_coordinator,
                                     ErrorCode.coordinator_load_in_progress])
def test_a_coordinator_not_there_is_retriable(tmp_path: Path, refusal: ErrorCode) -> None:
    answer, _ = produce_once(tmp_path, 9, OTHER, FakeVerifier(refusal))
    assert answer.error_code == ErrorCode.not_enough_replicas


@pytest.mark.parametrize(("version", "expected"), [
    (9, ErrorCode.not_enough_replicas), (12, ErrorCode.concurrent_transactions)])
def test_a_transaction_mid_transition_is_retriable(tmp_path: Path, version: int,
                                                   expected: ErrorCode) -> None:
    """Kafka's ReplicaManager turns CONCURRENT_TRANSACTIONS into NOT_ENOUGH_REPLICAS unless
    the producer supports the epoch bump (Produce v12): before, librdkafka (Produce < v12)
    took it as abortable and the transaction failed (seen in the transactional fault run)."""
    answer, _ = produce_once(tmp_path, version, OTHER,
                             FakeVerifier(ErrorCode.concurrent_transactions))
    assert answer.error_code == expected


def test_no_coordinator_leader_is_retriable(tmp_path: Path) -> None:
    verifier = FakeVerifier()
    answer, local = produce_once(tmp_path, 9, NO_LEADER, verifier)
    assert answer.error_code == ErrorCode.not_enough_replicas
    assert verifier.calls == [] and local.asked == 0


def test_the_local_coordinator_answers_for_the_ids_it_owns(tmp_path: Path) -> None:
    verifier = FakeVerifier()
    answer, local = produce_once(tmp_path, 9, ME, verifier)
    # This broker owns the id: its own coordinator is asked (here, it refuses).
    assert local.asked == 1 and verifier.calls == []
    assert answer.error_code == ErrorCode.not_enough_replicas
