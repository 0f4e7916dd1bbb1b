"""Transactions and two-phase commit (KIP-939) with oncelog.client on a real broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable

import pytest

from oncelog.client import (
    Admin,
    Consumer,
    OffsetAndMetadata,
    PreparedTxnState,
    Producer,
    TopicPartition,
    TxnState,
)
from oncelog.client.errors import (
    IllegalStateError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
)
from oncelog.client.types import Message
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_group, unique_name, unique_topic

PARTITIONS = 3
BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def tpc_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A broker with two-phase commit enabled."""
    return broker_factory(configs={"transaction.two.phase.commit.enable": True})


def make_topic(bootstrap: str, prefix: str = "txn") -> str:
    topic = unique_topic(prefix)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, PARTITIONS)
    return topic


def txn_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})


def read_all(
    bootstrap: str, topic: str, *, committed: bool = True, settle: float = 1.5
) -> list[Message]:
    """Everything readable now, reading until nothing new arrives for ``settle`` seconds."""
    config = {
        "bootstrap.servers": bootstrap,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    }
    got: list[Message] = []
    with Consumer(config) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        quiet_until = time.monotonic() + settle
        while time.monotonic() < quiet_until:
            batch = consumer.poll(0.2)
            if batch:
                got.extend(batch)
                quiet_until = time.monotonic() + settle
    return got


def values(messages: list[Message]) -> list[bytes]:
    return sorted(m.value or b"" for m in messages)


def test_committed_visible_aborted_not(broker: BrokerProcess) -> None:
    topic = make_topic(broker.bootstrap)
    with txn_producer(broker.bootstrap, unique_name("tx")) as producer:
        producer.init_transactions()
        assert producer.transaction_state is TxnState.READY
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, f"commit-{i}".encode(), key=str(i).encode())
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic, f"abort-{i}".encode(), key=str(i).encode())
        producer.flush(30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.commit_transaction()
    assert values(read_all(broker.bootstrap, topic)) == sorted(
        [f"commit-{i}".encode() for i in range(6)] + [b"after"]
    )
    uncommitted = values(read_all(broker.bootstrap, topic, committed=False))
    assert len(uncommitted) == 13 and b"abort-0" in uncommitted


def test_open_transaction_is_invisible_and_seek_to_end_stops_at_the_lso(
    broker: BrokerProcess,
) -> None:
    topic = make_topic(broker.bootstrap)
    tp = TopicPartition(topic, 0)
    with Producer({"bootstrap.servers": broker.bootstrap}) as plain:
        plain.send(topic, b"before", partition=0).result(30)
    producer = txn_producer(broker.bootstrap, unique_name("tx"))
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for _ in range(3):
            producer.send(topic, b"open", partition=0)
        producer.flush(30)
        rc = Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"})
        ru = Consumer(
            {"bootstrap.servers": broker.bootstrap, "isolation.level": "read_uncommitted"}
        )
        try:
            rc.assign([tp])
            ru.assign([tp])
            rc.seek_to_end([tp])
            ru.seek_to_end([tp])
            assert rc.position(tp) == 1  # the LSO: first offset of the open transaction
            assert ru.position(tp) == 4  # the high watermark
            rc.seek_to_beginning()
            seen = [m.value for m in rc.poll(1.0)]
            assert seen == [b"before"]
            producer.commit_transaction()
            deadline = time.monotonic() + 15
            while len(seen) < 4 and time.monotonic() < deadline:
                seen.extend(m.value for m in rc.poll(0.3))
            assert seen == [b"before", b"open", b"open", b"open"]
        finally:
            rc.close()
            ru.close()
    finally:
        producer.close()


def test_send_offsets_to_transaction_commits_with_the_transaction(broker: BrokerProcess) -> None:
    source = make_topic(broker.bootstrap, "src")
    sink = make_topic(broker.bootstrap, "sink")
    group = unique_group("eos")
    with Producer({"bootstrap.servers": broker.bootstrap}) as plain:
        for i in range(9):
            plain.send(source, f"in-{i}".encode(), partition=i % PARTITIONS)
        plain.flush(30)
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    producer = txn_producer(broker.bootstrap, unique_name("eos"))
    tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
    try:
        consumer.assign(tps)
        producer.init_transactions()
        got: list[Message] = []
        deadline = time.monotonic() + 20
        while len(got) < 9 and time.monotonic() < deadline:
            got.extend(consumer.poll(0.3))
        assert len(got) == 9
        # An aborted attempt leaves neither output nor offsets.
        producer.begin_transaction()
        for m in got:
            producer.send(sink, (m.value or b"").replace(b"in", b"out"))
        offsets = {tp: OffsetAndMetadata(consumer.position(tp)) for tp in tps}
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.abort_transaction()
        assert consumer.committed(tps) == {tp: None for tp in tps}
        # The committed attempt makes both visible together.
        producer.begin_transaction()
        for m in got:
            producer.send(sink, (m.value or b"").replace(b"in", b"out"))
        producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
        producer.commit_transaction()
        assert consumer.committed(tps) == {tp: OffsetAndMetadata(3) for tp in tps}
    finally:
        producer.close()
        consumer.close()
    assert values(read_all(broker.bootstrap, sink)) == sorted(f"out-{i}".encode() for i in range(9))


def test_a_new_instance_fences_the_old_one(broker: BrokerProcess) -> None:
    topic = make_topic(broker.bootstrap)
    txn_id = unique_name("fence")
    old = txn_producer(broker.bootstrap, txn_id)
    new = txn_producer(broker.bootstrap, txn_id)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic, b"zombie", partition=0).result(30)
        new.init_transactions()  # aborts the old instance's transaction and bumps the epoch
        assert new.producer_epoch > old.producer_epoch
        with pytest.raises(ProducerFencedError):
            old.commit_transaction()
        assert old.transaction_state is TxnState.FATAL_ERROR
        with pytest.raises(ProducerFencedError):
            old.send(topic, b"more")
        new.begin_transaction()
        new.send(topic, b"fresh", partition=0)
        new.commit_transaction()
    finally:
        old.close()
        new.close()
    assert values(read_all(broker.bootstrap, topic)) == [b"fresh"]


def test_calls_out_of_order_raise_illegal_state(broker: BrokerProcess) -> None:
    topic = make_topic(broker.bootstrap)
    with txn_producer(broker.bootstrap, unique_name("order")) as producer:
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()  # before init_transactions
        producer.init_transactions()
        with pytest.raises(IllegalStateError):
            producer.send(topic, b"outside a transaction")
        with pytest.raises(IllegalStateError):
            producer.commit_transaction()
        producer.begin_transaction()
        with pytest.raises(InvalidTxnStateError):
            producer.prepare_transaction()  # 2PC not enabled on this producer
        producer.abort_transaction()


def test_admin_lists_and_describes_an_open_transaction(broker: BrokerProcess) -> None:
    topic = make_topic(broker.bootstrap)
    txn_id = unique_name("desc")
    with (
        txn_producer(broker.bootstrap, txn_id) as producer,
        Admin({"bootstrap.servers": broker.bootstrap}) as admin,
    ):
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"x", partition=1).result(30)
        listed = {t.transactional_id: t for t in admin.list_transactions()}
        assert listed[txn_id].producer_id == producer.producer_id
        assert listed[txn_id].state == "Ongoing"
        described = admin.describe_transactions([txn_id])[txn_id]
        assert described.state == "Ongoing"
        assert described.partitions == (TopicPartition(topic, 1),)
        assert (described.producer_id, described.producer_epoch) == (
            producer.producer_id,
            producer.producer_epoch,
        )
        producers = admin.describe_producers([TopicPartition(topic, 1)])[TopicPartition(topic, 1)]
        assert [p.current_txn_start_offset for p in producers] == [0]
        producer.abort_transaction()


# ------------------------------------------------------------------ two-phase commit (KIP-939)

PREPARE_AND_DIE = textwrap.dedent(
    """
    import os, signal, sys
    from oncelog.client import Producer
    bootstrap, txn_id, topic = sys.argv[1:4]
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id,
                         "transaction.two.phase.commit.enable": True})
    producer.init_transactions()
    producer.begin_transaction()
    for p in range(3):
        producer.send(topic, f"prepared-{p}".encode(), partition=p)
    state = producer.prepare_transaction()
    print(state, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def prepare_in_a_process_and_kill_it(bootstrap: str, txn_id: str, topic: str) -> PreparedTxnState:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-c", PREPARE_AND_DIE, bootstrap, txn_id, topic],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO_ROOT,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    return PreparedTxnState(done.stdout.strip())


def test_2pc_prepared_transaction_survives_kill_and_commits(tpc_broker: BrokerProcess) -> None:
    topic = make_topic(tpc_broker.bootstrap)
    txn_id = unique_name("2pc")
    state = prepare_in_a_process_and_kill_it(tpc_broker.bootstrap, txn_id, topic)
    assert state.has_transaction
    assert read_all(tpc_broker.bootstrap, topic, settle=0.5) == []
    with txn_producer(
        tpc_broker.bootstrap, txn_id, **{"transaction.two.phase.commit.enable": True}
    ) as producer:
        producer.init_transactions(keep_prepared_txn=True)
        assert producer.transaction_state is TxnState.PREPARED_TRANSACTION
        assert producer.prepared_state == state
        with pytest.raises(IllegalStateError):
            producer.send(topic, b"not allowed while prepared")
        producer.complete_transaction(str(state))
        assert producer.transaction_state is TxnState.READY
    assert values(read_all(tpc_broker.bootstrap, topic)) == [
        b"prepared-0",
        b"prepared-1",
        b"prepared-2",
    ]


def test_2pc_mismatched_state_aborts(tpc_broker: BrokerProcess) -> None:
    topic = make_topic(tpc_broker.bootstrap)
    txn_id = unique_name("2pc")
    state = prepare_in_a_process_and_kill_it(tpc_broker.bootstrap, txn_id, topic)
    other = PreparedTxnState(producer_id=state.producer_id, epoch=(state.epoch + 7) % 32000)
    with txn_producer(
        tpc_broker.bootstrap, txn_id, **{"transaction.two.phase.commit.enable": True}
    ) as producer:
        producer.init_transactions(keep_prepared_txn=True)
        producer.complete_transaction(other)
        assert producer.transaction_state is TxnState.READY
    assert read_all(tpc_broker.bootstrap, topic) == []
    assert len(read_all(tpc_broker.bootstrap, topic, committed=False)) == 3


def test_2pc_in_process_prepare_then_complete(tpc_broker: BrokerProcess) -> None:
    topic = make_topic(tpc_broker.bootstrap)
    with txn_producer(
        tpc_broker.bootstrap, unique_name("2pc"), **{"transaction.two.phase.commit.enable": True}
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"one", partition=0)
        state = producer.prepare_transaction()
        assert state == PreparedTxnState(
            producer_id=producer.producer_id, epoch=producer.producer_epoch
        )
        assert producer.transaction_state is TxnState.PREPARED_TRANSACTION
        producer.complete_transaction(state)
    assert values(read_all(tpc_broker.bootstrap, topic)) == [b"one"]


def test_2pc_prepare_of_an_empty_transaction_completes_and_the_producer_goes_on(
    tpc_broker: BrokerProcess,
) -> None:
    """A prepared transaction that wrote nothing has nothing on the broker to end; completing
    it must not send EndTxn (the broker would answer INVALID_TXN_STATE, a fatal error)."""
    topic = make_topic(tpc_broker.bootstrap)
    with txn_producer(
        tpc_broker.bootstrap, unique_name("2pc"), **{"transaction.two.phase.commit.enable": True}
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.complete_transaction(producer.prepare_transaction())
        producer.begin_transaction()
        producer.send(topic, b"after", partition=0)
        producer.complete_transaction(producer.prepare_transaction())
    assert values(read_all(tpc_broker.bootstrap, topic)) == [b"after"]


def test_keep_prepared_without_an_ongoing_transaction_makes_complete_a_no_op(
    tpc_broker: BrokerProcess,
) -> None:
    with txn_producer(
        tpc_broker.bootstrap, unique_name("2pc"), **{"transaction.two.phase.commit.enable": True}
    ) as producer:
        producer.init_transactions(keep_prepared_txn=True)
        assert producer.transaction_state is TxnState.READY
        producer.complete_transaction(PreparedTxnState("5:5"))
        assert producer.transaction_state is TxnState.READY


def test_2pc_refused_when_the_broker_does_not_allow_it(broker: BrokerProcess) -> None:
    with txn_producer(
        broker.bootstrap, unique_name("2pc"), **{"transaction.two.phase.commit.enable": True}
    ) as producer:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            producer.init_transactions()


def test_prepared_transaction_outlives_the_max_timeout_until_force_terminated(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(
        configs={
            "transaction.two.phase.commit.enable": True,
            "transaction.max.timeout.ms": 2000,
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
        }
    )
    topic = make_topic(broker.bootstrap)
    txn_id = unique_name("2pc")
    producer = txn_producer(
        broker.bootstrap,
        txn_id,
        **{
            "transaction.two.phase.commit.enable": True,
            "transaction.timeout.ms": 1000,
        },
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"in doubt", partition=0)
        producer.prepare_transaction()
        time.sleep(3.5)  # past transaction.max.timeout.ms and several abort sweeps
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            assert admin.describe_transactions([txn_id])[txn_id].state == "Ongoing"
            admin.force_terminate_transaction(txn_id)
            deadline = time.monotonic() + 15
            # Aborted, then (as InitProducerId completes) Empty at the bumped epoch.
            while admin.describe_transactions([txn_id])[txn_id].state not in (
                "CompleteAbort",
                "Empty",
            ):
                assert time.monotonic() < deadline, "force-terminate did not abort"
                time.sleep(0.2)
        with pytest.raises(ProducerFencedError):
            producer.commit_transaction()
    finally:
        producer.close()
    assert read_all(broker.bootstrap, topic) == []
