"""The transactional and produce authorization checks (issue 17) on a real ``oncelog serve``
with the StandardAuthorizer, over SASL_PLAINTEXT with a SCRAM user per row.

``test_check`` is the table: each row is an action of a real client (confluent-kafka,
oncelog.client; the raw protocol only for what no client sends: a TxnOffsetCommit without
its AddOffsetsToTxn, a DescribeTransactions without its FindCoordinator, AddPartitionsToTxn
v4, WriteTxnMarkers under a broker's client id),
done first without the ACL the row is about (Kafka's exact error) and then with it (success,
or for raw rows the answer of the next check in Kafka's order). A row whose ACL the action
also needs on its way to the check (Write on the transactional id before EndTxn, ...) has it
granted and revokes it right before the request under test.

Then: a client without TwoPhaseCommit can neither enable 2PC nor keep a prepared
transaction (oncelog.client's KIP-939 API); nobody but a broker principal writes a marker or
an internal topic by any API; the response shapes Kafka gives (AddPartitionsToTxn's
OPERATION_NOT_ATTEMPTED, DescribeTransactions' hidden partitions).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as CKTopicPartition

from oncelog.client import Producer as OncelogProducer
from oncelog.client.admin import Admin
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.harness.rawkafka import produce
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from oncelog.protocol import versions as api
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.control import ControlType, encode_marker_batch
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.authz import (
    AuthzBroker,
    Names,
    admin_conf,
    authz_broker,
    error_name,
    outcome,
    raised,
)
from tests.support.names import unique_name

pytestmark = pytest.mark.integration

T = 30  # seconds any client call may take
NODE_ID = 1  # the broker's node.id (the default)
OP, RT = AclOperation, ResourceType


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzBroker]:
    yield from authz_broker(request, tmp_path_factory,
                            **{"transaction.two.phase.commit.enable": "true"})


def delivered(producer: Producer, topic: str, value: bytes = b"v") -> str:
    """Produce one record and flush: the delivery report's error name ("NONE"), or the
    producer's fatal error."""
    errors: list[KafkaError | None] = []

    def flushed() -> None:
        producer.produce(topic, value, partition=0,
                         on_delivery=lambda err, _msg: errors.append(err))
        assert producer.flush(T) == 0

    refused = outcome(flushed)
    return refused if refused != "NONE" else error_name(errors[0])


def committed(producer: Producer, topic: str) -> str:
    """Produce one record in the open transaction and commit: the error name ("NONE"). When
    AddPartitionsToTxn fails librdkafka purges the record and the commit says why."""
    error = delivered(producer, topic)
    if error in ("NONE", "_PURGE_QUEUE"):
        return outcome(lambda: producer.commit_transaction(T))
    return error


def txn_producer(b: AuthzBroker, n: Names) -> Producer:
    return Producer(b.confluent(n.user, **{"transactional.id": n.txn}))


# ----------------------------------------------------------------------- the actions
# Each takes the broker, the row's names and ``check`` (call it right before the request
# the row is about) and returns the error name the client saw.

Action = Callable[[AuthzBroker, Names, Callable[[], None]], str]


def init_transactional(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    producer = txn_producer(b, n)
    check()
    return outcome(lambda: producer.init_transactions(T))


def idempotent_produce(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    check()
    producer = Producer(b.confluent(n.user, **{"enable.idempotence": True}))
    return delivered(producer, n.topic)


def init_two_phase(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    settings: dict[str, Any] = {"transactional.id": n.txn,
                                "transaction.two.phase.commit.enable": True}
    producer = OncelogProducer(b.oncelog(n.user, **settings))
    try:
        check()
        return outcome(lambda: producer.init_transactions(timeout=T))
    finally:
        producer.close()


# librdkafka's words for the transactional request that failed (the Produce after an
# AddPartitionsToTxn and the TxnOffsetCommit after an AddOffsetsToTxn check the same ACLs:
# a row must see the error of its own request).
FAILED_REQUESTS = {"add partition": "AddPartitionsToTxn", "add offsets": "AddOffsetsToTxn",
                   "commit offsets": "TxnOffsetCommit"}


def with_request(err: KafkaError | KafkaClientError | None) -> str:
    """``error_name(err)`` and, for librdkafka's transactional errors, the request."""
    if err is None:
        return "NONE"
    text = str(err).lower()
    requests = [name for words, name in FAILED_REQUESTS.items() if words in text]
    return f"{error_name(err)} from {requests[0] if requests else 'another request'}"


def add_partition(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """A record in a transaction, committed: the error of AddPartitionsToTxn."""
    producer = txn_producer(b, n)
    producer.init_transactions(T)
    producer.begin_transaction()
    check()

    def produce_and_commit() -> None:
        producer.produce(n.topic, b"v", partition=0)
        assert producer.flush(T) == 0
        producer.commit_transaction(T)

    return with_request(raised(produce_and_commit))


def offsets_to_transaction(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    producer = txn_producer(b, n)
    consumer = Consumer(b.confluent(n.user, **{"group.id": n.group}))
    try:
        producer.init_transactions(T)
        producer.begin_transaction()
        check()
        return with_request(raised(lambda: producer.send_offsets_to_transaction(
            [CKTopicPartition(n.topic, 0, 1)], consumer.consumer_group_metadata(), T)))
    finally:
        consumer.close()


def end_transaction(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    producer = txn_producer(b, n)
    producer.init_transactions(T)
    producer.begin_transaction()
    assert delivered(producer, n.topic) == "NONE"
    check()
    return outcome(lambda: producer.commit_transaction(T))


def transactional_produce(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """The second record of a transaction: its partition is in the transaction already, so
    only the Produce request itself names the transactional id."""
    producer = txn_producer(b, n)
    producer.init_transactions(T)
    producer.begin_transaction()
    assert delivered(producer, n.topic) == "NONE"
    check()
    return delivered(producer, n.topic)


def plain_produce(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    check()
    return delivered(Producer(b.confluent(n.user, **{"enable.idempotence": False})), n.topic)


def open_transaction(b: AuthzBroker, n: Names) -> tuple[int, int, int]:
    """A transaction left open on ``n.topic``-0 by the super user's producer (its producer
    id, epoch and the partition's coordinator epoch, as DescribeProducers shows them)."""
    producer = Producer(admin_conf(b, **{"transactional.id": n.txn}))
    producer.init_transactions(T)
    producer.begin_transaction()
    assert delivered(producer, n.topic) == "NONE"
    [state] = b.admin.describe_producers([TopicPartition(n.topic, 0)])[
        TopicPartition(n.topic, 0)]
    return state.producer_id, state.producer_epoch, state.coordinator_epoch


def abort_transaction(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """Admin.abortTransaction: WriteTxnMarkers from a client (a hanging transaction)."""
    producer_id, epoch, coordinator_epoch = open_transaction(b, n)
    with Admin(b.oncelog(n.user)) as admin:
        check()
        return outcome(lambda: admin.abort_transaction(
            TopicPartition(n.topic, 0), producer_id, epoch, coordinator_epoch))


def list_transactions(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    if n.txn not in {t.transactional_id for t in b.admin.list_transactions()}:
        open_transaction(b, n)
    with Admin(b.oncelog(n.user)) as admin:
        check()
        listed = {t.transactional_id for t in admin.list_transactions()}
    return "LISTED" if n.txn in listed else "HIDDEN"


def raw_describe_transactions(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """DescribeTransactions v0 without FindCoordinator (which a client sends first and
    which needs the same Describe on the transactional id)."""
    if n.txn not in {t.transactional_id for t in b.admin.list_transactions()}:
        open_transaction(b, n)
    conn = b.raw(n.user)
    try:
        check()
        answer = conn.request(request(api.DESCRIBE_TRANSACTIONS, 0,
                                      transactional_ids=(n.txn,)))
    finally:
        conn.close()
    return ErrorCode(answer.transaction_states[0].error_code).name.upper()


def describe_producers(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    with Admin(b.oncelog(n.user)) as admin:
        check()
        return outcome(lambda: admin.describe_producers([TopicPartition(n.topic, 0)]))


def raw_txn_offset_commit(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """TxnOffsetCommit v3 without AddOffsetsToTxn (no client sends that: AddOffsetsToTxn
    checks the same transactional id and group first)."""
    conn = b.raw(n.user)
    try:
        check()
        answer = conn.request(request(
            api.TXN_OFFSET_COMMIT, 3, transactional_id=n.txn, group_id=n.group,
            producer_id=5000, producer_epoch=0, generation_id=-1, member_id="",
            group_instance_id=None, topics=(nested(
                api.TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestTopic", name=n.topic,
                partitions=(nested(api.TXN_OFFSET_COMMIT, 3, "TxnOffsetCommitRequestPartition",
                                   partition_index=0, committed_offset=1,
                                   committed_leader_epoch=-1, committed_metadata=""),)),)))
    finally:
        conn.close()
    return ErrorCode(answer.topics[0].partitions[0].error_code).name.upper()


def raw_add_partitions_v4(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """AddPartitionsToTxn v4 (verify only): what a partition leader sends a coordinator."""
    conn = b.raw(n.user)
    try:
        check()
        answer = conn.request(request(
            api.ADD_PARTITIONS_TO_TXN, 4, transactions=(nested(
                api.ADD_PARTITIONS_TO_TXN, 4, "AddPartitionsToTxnTransaction",
                transactional_id=n.txn, producer_id=5000, producer_epoch=0, verify_only=True,
                topics=(nested(api.ADD_PARTITIONS_TO_TXN, 4, "AddPartitionsToTxnTopic",
                               name=n.topic, partitions=(0,)),)),)))
    finally:
        conn.close()
    return ErrorCode(answer.error_code).name.upper()


def raw_broker_markers(b: AuthzBroker, n: Names, check: Callable[[], None]) -> str:
    """WriteTxnMarkers (ABORT) under the client id a broker's marker sender uses."""
    producer_id, epoch, coordinator_epoch = open_transaction(b, n)
    conn = b.raw(n.user, client_id=f"oncelog-broker-{NODE_ID}")
    try:
        check()
        answer = conn.request(request(
            api.WRITE_TXN_MARKERS, 1, markers=(nested(
                api.WRITE_TXN_MARKERS, 1, "WritableTxnMarker", producer_id=producer_id,
                producer_epoch=epoch, transaction_result=False,
                coordinator_epoch=coordinator_epoch,
                topics=(nested(api.WRITE_TXN_MARKERS, 1, "WritableTxnMarkerTopic",
                               name=n.topic, partition_indexes=(0,)),)),)))
    finally:
        conn.close()
    return ErrorCode(answer.markers[0].topics[0].partitions[0].error_code).name.upper()


# ------------------------------------------------------------------------- the table

Grant = tuple[ResourceType, AclOperation]


@dataclass(frozen=True)
class Row:
    id: str
    action: Action
    needed: Grant  # the ACL the row is about
    refused: str  # what the client sees without it
    others: tuple[Grant, ...] = ()  # what else the action needs, granted from the start
    setup_needs_it: bool = False  # ``needed`` is granted, and revoked at ``check``
    allowed: str = "NONE"  # what the client sees with it


W, R, D = OP.WRITE, OP.READ, OP.DESCRIBE
TXN_DENIED, TOPIC_DENIED = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", "TOPIC_AUTHORIZATION_FAILED"
ROWS = [
    # Describe on the id (not Write) gets the client past FindCoordinator, which needs it.
    Row("InitProducerId/Write-TransactionalId", init_transactional,
        (RT.TRANSACTIONAL_ID, W), TXN_DENIED, others=((RT.TRANSACTIONAL_ID, D),)),
    # Describe on the topic (which is not Write on it) lets the client find it in Metadata,
    # so what refuses it is InitProducerId, not the Metadata lookup.
    Row("InitProducerId-idempotent/Write-Topic", idempotent_produce,
        (RT.TOPIC, W), "CLUSTER_AUTHORIZATION_FAILED", others=((RT.TOPIC, D),)),
    # IdempotentWrite is enough for the producer id; the Produce then needs Write on it.
    # (Describe lets the producer see the topic in Metadata without Write on it.)
    Row("InitProducerId-idempotent/IdempotentWrite-Cluster", idempotent_produce,
        (RT.CLUSTER, OP.IDEMPOTENT_WRITE), "CLUSTER_AUTHORIZATION_FAILED",
        others=((RT.TOPIC, D),), allowed=TOPIC_DENIED),
    Row("InitProducerId-enable2Pc/TwoPhaseCommit-TransactionalId", init_two_phase,
        (RT.TRANSACTIONAL_ID, OP.TWO_PHASE_COMMIT), TXN_DENIED,
        others=((RT.TRANSACTIONAL_ID, W),)),
    Row("AddPartitionsToTxn/Write-TransactionalId", add_partition,
        (RT.TRANSACTIONAL_ID, W), f"{TXN_DENIED} from AddPartitionsToTxn",
        others=((RT.TOPIC, W),), setup_needs_it=True),
    Row("AddPartitionsToTxn/Write-Topic", add_partition,
        (RT.TOPIC, W), f"{TOPIC_DENIED} from AddPartitionsToTxn",
        others=((RT.TRANSACTIONAL_ID, W), (RT.TOPIC, D))),
    Row("AddOffsetsToTxn/Write-TransactionalId", offsets_to_transaction,
        (RT.TRANSACTIONAL_ID, W), f"{TXN_DENIED} from AddOffsetsToTxn",
        others=((RT.GROUP, R), (RT.TOPIC, R)), setup_needs_it=True),
    Row("AddOffsetsToTxn/Read-Group", offsets_to_transaction,
        (RT.GROUP, R), "GROUP_AUTHORIZATION_FAILED from AddOffsetsToTxn",
        others=((RT.TRANSACTIONAL_ID, W), (RT.TOPIC, R))),
    Row("TxnOffsetCommit/Read-Topic", offsets_to_transaction,
        (RT.TOPIC, R), f"{TOPIC_DENIED} from TxnOffsetCommit",
        others=((RT.TRANSACTIONAL_ID, W), (RT.GROUP, R))),
    # Raw: the answer with the ACL is the next check's (Kafka's order: id, group, topic).
    Row("TxnOffsetCommit/Write-TransactionalId", raw_txn_offset_commit,
        (RT.TRANSACTIONAL_ID, W), TXN_DENIED, allowed="GROUP_AUTHORIZATION_FAILED"),
    Row("TxnOffsetCommit/Read-Group", raw_txn_offset_commit,
        (RT.GROUP, R), "GROUP_AUTHORIZATION_FAILED", others=((RT.TRANSACTIONAL_ID, W),),
        allowed=TOPIC_DENIED),
    Row("EndTxn/Write-TransactionalId", end_transaction,
        (RT.TRANSACTIONAL_ID, W), TXN_DENIED, others=((RT.TOPIC, W),), setup_needs_it=True),
    Row("Produce-transactional/Write-TransactionalId", transactional_produce,
        (RT.TRANSACTIONAL_ID, W), TXN_DENIED, others=((RT.TOPIC, W),), setup_needs_it=True),
    Row("Produce/Write-Topic", plain_produce, (RT.TOPIC, W), TOPIC_DENIED,
        others=((RT.TOPIC, D),)),
    Row("WriteTxnMarkers-client/ClusterAction", abort_transaction,
        (RT.CLUSTER, OP.CLUSTER_ACTION), "CLUSTER_AUTHORIZATION_FAILED",
        others=((RT.TOPIC, D),)),
    Row("WriteTxnMarkers-broker-client-id/ClusterAction", raw_broker_markers,
        (RT.CLUSTER, OP.CLUSTER_ACTION), "CLUSTER_AUTHORIZATION_FAILED"),
    Row("AddPartitionsToTxn-v4/ClusterAction", raw_add_partitions_v4,
        (RT.CLUSTER, OP.CLUSTER_ACTION), "CLUSTER_AUTHORIZATION_FAILED"),
    Row("ListTransactions/Describe-TransactionalId", list_transactions,
        (RT.TRANSACTIONAL_ID, D), "HIDDEN", allowed="LISTED"),
    Row("DescribeTransactions/Describe-TransactionalId", raw_describe_transactions,
        (RT.TRANSACTIONAL_ID, D), TXN_DENIED),
    Row("DescribeProducers/Read-Topic", describe_producers, (RT.TOPIC, R), TOPIC_DENIED,
        others=((RT.TOPIC, D),)),
]


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_check(broker: AuthzBroker, row: Row) -> None:
    n = Names(broker.user())
    broker.admin.create_topic(n.topic, 1)
    for rtype, op in row.others:
        broker.grant(n.user, rtype, n.resource(rtype), op)
    rtype, op = row.needed

    def revoke() -> None:
        broker.revoke(n.user, rtype, n.resource(rtype), op)

    if row.setup_needs_it:
        broker.grant(n.user, rtype, n.resource(rtype), op)
    assert row.action(broker, n, revoke if row.setup_needs_it else lambda: None) == row.refused
    broker.grant(n.user, rtype, n.resource(rtype), op)
    assert row.action(broker, n, lambda: None) == row.allowed


# ----------------------------------------------------------------- two-phase commit

def test_two_phase_commit_needs_its_own_acl(broker: AuthzBroker) -> None:
    """KIP-939: with Write alone on the transactional id, a client can neither enable 2PC
    nor keep the prepared transaction another client left; with TwoPhaseCommit it keeps it
    and commits it."""
    owner, heir = broker.user("owner"), broker.user("heir")
    topic, txn = unique_name("t"), unique_name("tx")
    broker.admin.create_topic(topic, 1)
    for user in (owner, heir):
        broker.grant(user, RT.TRANSACTIONAL_ID, txn, OP.WRITE)
        broker.grant(user, RT.TOPIC, topic, OP.WRITE)
    broker.grant(owner, RT.TRANSACTIONAL_ID, txn, OP.TWO_PHASE_COMMIT)

    def producer(user: str, two_pc: bool) -> OncelogProducer:
        settings: dict[str, Any] = {"transactional.id": txn,
                                    "transaction.two.phase.commit.enable": two_pc}
        return OncelogProducer(broker.oncelog(user, **settings))

    first = producer(owner, True)
    first.init_transactions(timeout=T)
    first.begin_transaction()
    first.send(topic, b"prepared", partition=0).result(T)
    prepared = str(first.prepare_transaction(timeout=T))
    first.close()

    for two_pc, keep in ((True, False), (True, True), (False, True)):
        refused = producer(heir, two_pc)
        try:
            assert outcome(functools.partial(refused.init_transactions, keep_prepared_txn=keep,
                                             timeout=T)) == TXN_DENIED, (two_pc, keep)
        finally:
            refused.close()
    described = broker.admin.describe_transactions([txn])[txn]
    assert described.state == "Ongoing"  # still prepared, still its owner's

    broker.grant(heir, RT.TRANSACTIONAL_ID, txn, OP.TWO_PHASE_COMMIT)
    second = producer(heir, True)
    try:
        second.init_transactions(keep_prepared_txn=True, timeout=T)
        second.complete_transaction(prepared, timeout=T)
    finally:
        second.close()
    assert broker.admin.describe_transactions([txn])[txn].state == "CompleteCommit"


# ------------------------------------------- markers and internal topics: brokers only

def test_nobody_but_a_broker_writes_an_internal_topic(broker: AuthzBroker) -> None:
    """Produce to ``__transaction_state`` / ``__consumer_offsets``: TOPIC_AUTHORIZATION_FAILED
    without Write on them, INVALID_TOPIC_EXCEPTION with it, and for the super user too; a
    transaction cannot take them in either (AddPartitionsToTxn: TOPIC_AUTHORIZATION_FAILED
    even for the super user, as Kafka)."""
    user = broker.user()
    plain = {"enable.idempotence": False}
    for topic in (TRANSACTION_STATE_TOPIC, OFFSETS_TOPIC):
        assert delivered(Producer(broker.confluent(user, **plain)), topic) == TOPIC_DENIED
        broker.grant(user, RT.TOPIC, topic, OP.WRITE)
        assert delivered(Producer(broker.confluent(user, **plain)), topic) == \
            "INVALID_TOPIC_EXCEPTION"
        assert delivered(Producer(admin_conf(broker, **plain)), topic) == \
            "INVALID_TOPIC_EXCEPTION"
        producer = Producer(admin_conf(broker, **{"transactional.id": unique_name("tx")}))
        producer.init_transactions(T)
        producer.begin_transaction()
        assert committed(producer, topic) == TOPIC_DENIED


def test_nobody_produces_a_control_batch(broker: AuthzBroker) -> None:
    """A COMMIT marker sent as Produce: refused whole (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    without a transactional id, and INVALID_RECORD with one the sender may write, for the
    super user too (only WriteTxnMarkers writes control records)."""
    topic, txn = unique_name("t"), unique_name("tx")
    broker.admin.create_topic(topic, 1)
    marker = encode_marker_batch(ControlType.COMMIT, 7000, 0, 0, 0)
    user = broker.user()
    broker.grant(user, RT.TOPIC, topic, OP.WRITE)
    broker.grant(user, RT.TRANSACTIONAL_ID, txn, OP.WRITE)
    conn = broker.raw(user)
    try:
        assert produce(conn, topic, marker).error_code == \
            ErrorCode.transactional_id_authorization_failed
        assert produce(conn, topic, marker, txn).error_code == ErrorCode.invalid_record
        data = encode_batch([RecordInput(key=b"k", value=b"v")], producer_id=7000,
                            producer_epoch=0, base_sequence=0, transactional=True)
        assert produce(conn, topic, data).error_code == \
            ErrorCode.transactional_id_authorization_failed
    finally:
        conn.close()


def test_add_partitions_answers_operation_not_attempted(broker: AuthzBroker) -> None:
    """AddPartitionsToTxn v3 naming a writable topic and one the user may not write:
    TOPIC_AUTHORIZATION_FAILED on the latter, OPERATION_NOT_ATTEMPTED on the former, nothing
    added (raw, to read the per-partition answer no client shows)."""
    user, ok_topic, denied_topic, txn = broker.user(), unique_name("t"), unique_name("t"), \
        unique_name("tx")
    for topic in (ok_topic, denied_topic):
        broker.admin.create_topic(topic, 1)
    broker.grant(user, RT.TOPIC, ok_topic, OP.WRITE)
    broker.grant(user, RT.TRANSACTIONAL_ID, txn, OP.WRITE)
    conn = broker.raw(user)
    try:
        init = conn.request(request(api.INIT_PRODUCER_ID, 3, transactional_id=txn,
                                    transaction_timeout=60000, producer_id=-1,
                                    producer_epoch=-1))
        assert init.error_code == ErrorCode.none
        answer = conn.request(request(
            api.ADD_PARTITIONS_TO_TXN, 3, v3_and_below_transactional_id=txn,
            v3_and_below_producer_id=init.producer_id,
            v3_and_below_producer_epoch=init.producer_epoch,
            v3_and_below_topics=tuple(
                nested(api.ADD_PARTITIONS_TO_TXN, 3, "AddPartitionsToTxnTopic", name=topic,
                       partitions=(0,)) for topic in (ok_topic, denied_topic))))
    finally:
        conn.close()
    codes = {t.name: ErrorCode(t.results_by_partition[0].partition_error_code)
             for t in answer.results_by_topic_v3_and_below}
    assert codes == {ok_topic: ErrorCode.operation_not_attempted,
                     denied_topic: ErrorCode.topic_authorization_failed}
    assert broker.admin.describe_transactions([txn])[txn].partitions == ()


def test_describe_transactions_hides_partitions_of_undescribable_topics(
        broker: AuthzBroker) -> None:
    n = Names(broker.user())
    broker.admin.create_topic(n.topic, 1)
    open_transaction(broker, n)
    broker.grant(n.user, RT.TRANSACTIONAL_ID, n.txn, OP.DESCRIBE)
    with Admin(broker.oncelog(n.user)) as admin:
        assert admin.describe_transactions([n.txn])[n.txn].partitions == ()
        broker.grant(n.user, RT.TOPIC, n.topic, OP.DESCRIBE)
        assert admin.describe_transactions([n.txn])[n.txn].partitions == (
            TopicPartition(n.topic, 0),)
