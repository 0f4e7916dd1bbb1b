"""Transactions v2 (KIP-890 part 2): the same raw request sequences to Apache Kafka 4.4 (one
KRaft node) and to ``oncelog serve``, and the same observations.

What is compared: the ``transaction.version`` feature in ApiVersions (v3 and v4), Produce
v12's implicit partition add, EndTxn v5's answer (the epoch bumped per transaction), a
retried EndTxn, the second transaction's epoch, fencing of the previous epoch at the
partition and at the coordinator, AddPartitionsToTxn v5 verification, an abort with no
transaction, and all of it again with the broker at ``transaction.version`` 1 (Kafka
downgraded with UpdateFeatures, oncelog configured down). Producer ids differ between the
brokers; epochs are compared relative to the first one InitProducerId handed out.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kio.schema.add_partitions_to_txn.v3 import request as apt3
from kio.schema.add_partitions_to_txn.v5 import request as apt5
from kio.schema.api_versions.v3.request import ApiVersionsRequest as ApiVersionsV3
from kio.schema.api_versions.v4.request import ApiVersionsRequest as ApiVersionsV4
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v4.request import EndTxnRequest as EndTxnV4
from kio.schema.end_txn.v5.request import EndTxnRequest as EndTxnV5
from kio.schema.errors import ErrorCode
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v5.request import InitProducerIdRequest
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.produce.v11 import request as p11
from kio.schema.produce.v12 import request as p12
from kio.schema.types import BrokerId, ProducerId, TopicName, TransactionalId
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import Records, i8, i16, i32, i32Timedelta, i64
from rawkafka import RawConnection

from oncelog.harness.broker import BrokerProcess
from oncelog.records.codec import RecordInput, encode_batch
from tests.support.kafka import KafkaProcess

pytestmark = pytest.mark.integration

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))
RETRIABLE = {
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
    # A topic just created: Kafka's broker may not lead its partitions yet.
    ErrorCode.not_leader_or_follower,
    ErrorCode.unknown_topic_or_partition,
}
Observations = list[tuple[str, Any]]


def retry(call: Callable[[], Any], code_of: Callable[[Any], ErrorCode]) -> Any:
    """``call()`` until its answer is not a retriable coordinator error (20 s at most)."""
    deadline = time.monotonic() + 20
    while True:
        answer = call()
        if code_of(answer) not in RETRIABLE or time.monotonic() > deadline:
            return answer
        time.sleep(0.05)


class Session:
    """One raw connection and one transactional id, recording what a client observes."""

    def __init__(self, bootstrap: str) -> None:
        self.conn = RawConnection(bootstrap)
        self.txn_id = f"txv2-{uuid.uuid4().hex[:8]}"
        self.topic = f"txv2-{uuid.uuid4().hex[:8]}"
        self.producer_id = -1
        self.base_epoch = 0
        self.sequences: dict[tuple[int, int], int] = {}
        self.seen: Observations = []

    def note(self, label: str, value: Any) -> None:
        self.seen.append((label, value))

    def setup(self) -> None:
        created = self.conn.request(CreateTopicsRequest(
            topics=(CreatableTopic(name=TopicName(self.topic), num_partitions=i32(2),
                                   replication_factor=i16(1), assignments=(), configs=()),),
            timeout=TIMEOUT, validate_only=False,
        ))
        assert created.topics[0].error_code == ErrorCode.none, created
        found = retry(
            lambda: self.conn.request(FindCoordinatorRequest(
                key_type=i8(1), coordinator_keys=(self.txn_id,))),
            lambda r: r.coordinators[0].error_code,
        )
        assert found.coordinators[0].error_code == ErrorCode.none, found

    def features(self) -> None:
        for name, request in (("v3", ApiVersionsV3), ("v4", ApiVersionsV4)):
            answer = self.conn.request(
                request(client_software_name="raw", client_software_version="1"))
            supported = [(f.min_version, f.max_version) for f in answer.supported_features
                         if f.name == "transaction.version"]
            finalized = [(f.min_version_level, f.max_version_level)
                         for f in answer.finalized_features if f.name == "transaction.version"]
            versions = {int(k.api_key): (int(k.min_version), int(k.max_version))
                        for k in answer.api_keys}
            self.note(f"ApiVersions {name} supported transaction.version", supported)
            self.note(f"ApiVersions {name} finalized transaction.version", finalized)
            self.note(f"ApiVersions {name} finalized epoch valid",
                      answer.finalized_features_epoch >= 0)
            self.note(f"ApiVersions {name} EndTxn max", versions[26][1])
            self.note(f"ApiVersions {name} Produce has 12", versions[0][1] >= 12)
            self.note(f"ApiVersions {name} AddPartitionsToTxn max", versions[24][1])

    def rel(self, epoch: int) -> int:
        return epoch - self.base_epoch

    def init(self, label: str) -> None:
        answer = retry(
            lambda: self.conn.request(InitProducerIdRequest(
                transactional_id=TransactionalId(self.txn_id),
                transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
                producer_id=ProducerId(self.producer_id if self.producer_id >= 0 else -1),
                producer_epoch=i16(-1 if self.producer_id < 0 else self.base_epoch),
            )),
            lambda r: r.error_code,
        )
        if self.producer_id < 0:
            self.producer_id, self.base_epoch = int(answer.producer_id), int(answer.producer_epoch)
        self.note(label, (answer.error_code.name, self.rel(int(answer.producer_epoch))))

    def produce(self, label: str, partition: int, epoch: int, version: int = 12) -> None:
        key = (partition, epoch)
        sequence = self.sequences.get(key, 0)
        batch = encode_batch(
            [RecordInput(key=b"k", value=f"{label}".encode())],
            producer_id=self.producer_id, producer_epoch=epoch, base_sequence=sequence,
            transactional=True,
        )
        mod = p12 if version == 12 else p11
        request = mod.ProduceRequest(
            transactional_id=TransactionalId(self.txn_id), acks=i16(-1), timeout=TIMEOUT,
            topic_data=(mod.TopicProduceData(name=TopicName(self.topic), partition_data=(
                mod.PartitionProduceData(index=i32(partition), records=Records(batch)),)),),
        )
        answer = retry(
            lambda: self.conn.request(request).responses[0].partition_responses[0],
            lambda r: r.error_code,
        )
        if answer.error_code == ErrorCode.none:
            self.sequences[key] = sequence + 1
        self.note(label, answer.error_code.name)

    def end(self, label: str, commit: bool, epoch: int, version: int = 5) -> int:
        request_cls = EndTxnV5 if version == 5 else EndTxnV4
        answer = retry(
            lambda: self.conn.request(request_cls(
                transactional_id=TransactionalId(self.txn_id),
                producer_id=ProducerId(self.producer_id), producer_epoch=i16(epoch),
                committed=commit,
            )),
            lambda r: r.error_code,
        )
        same_id = int(getattr(answer, "producer_id", -1)) in (self.producer_id, -1)
        epoch_seen = int(getattr(answer, "producer_epoch", -1))
        self.note(label, (answer.error_code.name, same_id,
                          self.rel(epoch_seen) if epoch_seen >= 0 else epoch_seen))
        return epoch_seen

    def add_partitions_v3(self, label: str, partition: int, epoch: int) -> None:
        answer = retry(
            lambda: self.conn.request(apt3.AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TransactionalId(self.txn_id),
                v3_and_below_producer_id=ProducerId(self.producer_id),
                v3_and_below_producer_epoch=i16(epoch),
                v3_and_below_topics=(apt3.AddPartitionsToTxnTopic(
                    name=TopicName(self.topic), partitions=(i32(partition),)),),
            )),
            lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0]
            .partition_error_code,
        )
        self.note(label, answer.results_by_topic_v3_and_below[0].results_by_partition[0]
                  .partition_error_code.name)

    def verify_v5(self, label: str, partition: int, epoch: int) -> None:
        answer = self.conn.request(apt5.AddPartitionsToTxnRequest(transactions=(
            apt5.AddPartitionsToTxnTransaction(
                transactional_id=TransactionalId(self.txn_id),
                producer_id=ProducerId(self.producer_id), producer_epoch=i16(epoch),
                verify_only=True,
                topics=(apt5.AddPartitionsToTxnTopic(
                    name=TopicName(self.topic), partitions=(i32(partition),)),),
            ),
        )))
        result = answer.results_by_transaction[0].topic_results[0].results_by_partition[0]
        self.note(label, (answer.error_code.name, result.partition_error_code.name))

    def describe(self, label: str) -> None:
        state = self.conn.request(DescribeTransactionsRequest(
            transactional_ids=(TransactionalId(self.txn_id),))).transaction_states[0]
        partitions = sorted((t.topic == self.topic, p) for t in state.topics for p in t.partitions)
        self.note(label, (state.error_code.name, state.transaction_state,
                          self.rel(int(state.producer_epoch)), partitions))

    def wait_stable(self, label: str, partition: int, expected: int) -> None:
        """The read_committed end offset of ``partition`` once it reaches ``expected``
        (markers are written after EndTxn returns on Kafka), or its value after 20 s."""
        deadline = time.monotonic() + 20
        while True:
            answer = self.conn.request(ListOffsetsRequest(
                replica_id=BrokerId(-1), isolation_level=i8(1),
                topics=(ListOffsetsTopic(name=TopicName(self.topic), partitions=(
                    ListOffsetsPartition(partition_index=i32(partition),
                                         current_leader_epoch=i32(-1),
                                         timestamp=i64(-1)),)),),
            ))
            offset = int(answer.topics[0].partitions[0].offset)
            if offset >= expected or time.monotonic() > deadline:
                self.note(label, offset)
                return
            time.sleep(0.05)


def observe(bootstrap: str, steps: Callable[[Session, int], None]) -> Observations:
    """Set up a session (topic, coordinator, features, InitProducerId), run ``steps`` with
    the first epoch, and return everything observed."""
    s = Session(bootstrap)
    try:
        s.setup()
        s.features()
        s.init("init")
        steps(s, s.base_epoch)
        return s.seen
    finally:
        s.conn.close()


def scenario_tv2(bootstrap: str) -> Observations:
    return observe(bootstrap, steps_tv2)


def scenario_tv1(bootstrap: str) -> Observations:
    return observe(bootstrap, steps_tv1)


def steps_tv2(s: Session, e: int) -> None:
    s.produce("v12 produce p0, not added", 0, e)
    s.produce("v12 produce p1, not added", 1, e)
    s.describe("describe after implicit adds")
    s.verify_v5("AddPartitionsToTxn v5 verify p0", 0, e)
    e1 = s.end("EndTxn v5 commit", True, e)
    s.end("EndTxn v5 commit retried at the old epoch", True, e)
    s.wait_stable("p0 LSO after commit", 0, 2)
    s.wait_stable("p1 LSO after commit", 1, 2)
    s.produce("v12 produce at the fenced epoch", 0, e)
    s.verify_v5("AddPartitionsToTxn v5 verify at the old epoch", 0, e)
    s.verify_v5("AddPartitionsToTxn v5 verify p0, new epoch, no txn", 0, e1)
    s.produce("v12 produce second txn", 0, e1)
    s.describe("describe second txn")
    s.end("EndTxn v5 commit at the fenced epoch", True, e)
    e2 = s.end("EndTxn v5 abort second txn", False, e1)
    s.end("EndTxn v5 commit retried after abort", True, e1)
    s.wait_stable("p0 LSO after abort", 0, 4)
    e3 = s.end("EndTxn v5 abort with no transaction", False, e2)
    s.end("EndTxn v5 commit with no transaction", True, e3)
    s.produce("v11 produce, not added", 1, e3, version=11)
    s.add_partitions_v3("AddPartitionsToTxn v3 under TV2", 1, e3)
    s.produce("v11 produce after AddPartitionsToTxn v3", 1, e3, version=11)
    s.end("EndTxn v4 commit under TV2", True, e3, version=4)
    s.wait_stable("p1 LSO after EndTxn v4", 1, 4)
    s.end("EndTxn v4 commit retried", True, e3, version=4)
    s.end("EndTxn v5 commit at the v4 epoch", True, e3)


def steps_tv1(s: Session, e: int) -> None:
    s.produce("v12 produce p0, not added", 0, e)
    s.add_partitions_v3("AddPartitionsToTxn v3 p0", 0, e)
    s.produce("v12 produce p0 after add", 0, e)
    s.end("EndTxn v5 commit", True, e)
    s.wait_stable("p0 LSO after commit", 0, 2)
    s.add_partitions_v3("AddPartitionsToTxn v3 second txn", 0, e)
    s.produce("v12 produce second txn", 0, e)
    s.end("EndTxn v4 abort", False, e, version=4)
    s.end("EndTxn v4 abort with no transaction", False, e, version=4)


def downgrade_kafka(kafka: KafkaProcess, level: int) -> None:
    """Kafka's transaction.version is a finalized feature: lower it with UpdateFeatures."""
    conn = RawConnection(kafka.bootstrap)
    try:
        answer = conn.request(UpdateFeaturesRequest(
            timeout=TIMEOUT,
            feature_updates=(FeatureUpdateKey(feature="transaction.version",
                                              max_version_level=i16(level),
                                              upgrade_type=i8(2)),),
        ))
        assert answer.error_code == ErrorCode.none, answer
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            versions = conn.request(
                ApiVersionsV4(client_software_name="raw", client_software_version="1"))
            if [f.max_version_level for f in versions.finalized_features
                    if f.name == "transaction.version"] == [level]:
                return
            time.sleep(0.05)
        raise AssertionError("Kafka did not finalize transaction.version " + str(level))
    finally:
        conn.close()


def compare(kafka_seen: Observations, oncelog_seen: Observations) -> None:
    differences = [
        (label, theirs, ours)
        for (label, theirs), (_, ours) in zip(kafka_seen, oncelog_seen, strict=True)
        if theirs != ours
    ]
    assert not differences, "\n".join(
        f"{label}: kafka {theirs!r}, oncelog {ours!r}" for label, theirs, ours in differences
    )


def test_transactions_v2_as_kafka(kafka_broker: KafkaProcess, broker: BrokerProcess) -> None:
    compare(scenario_tv2(kafka_broker.bootstrap), scenario_tv2(broker.bootstrap))


def test_transactions_v1_as_kafka(kafka_broker: KafkaProcess, broker_factory: Any) -> None:
    downgrade_kafka(kafka_broker, 1)
    oncelog = broker_factory(configs={"transaction.version": 1})
    compare(scenario_tv1(kafka_broker.bootstrap), scenario_tv1(oncelog.bootstrap))
