"""The transaction coordinator's broker killed between a durable PrepareCommit/PrepareAbort
and the markers, and a KIP-939 prepared transaction across a coordinator failover.

Three brokers, replication factor 3, ``min.insync.replicas`` 2. The data partitions are led by
the two brokers that are not the transaction's coordinator, so only the coordinator dies: the
new leader of its ``__transaction_state`` partition loads the Prepare* record (which the
in-sync replicas had before the coordinator went on) and writes the markers itself.

kafka-python's ``commit_transaction()`` across the same kill (issue 25, item 6) shows a client
bug, not a broker one: see ``test_kafka_python_commit_across_coordinator_failover``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import KafkaConnectionError

from oncelog.client import Admin
from oncelog.client import Producer as OncelogProducer
from oncelog.coordinator.transaction import transaction_log_partition
from oncelog.errors import ErrorCode
from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC

ClusterFactory = Callable[..., ClusterProcess]

TOPIC = "crashcoord"
TXN_PARTITIONS = 3
PER_PARTITION = 3
CRASH_POINT = "txn.prepared.before_markers"
STATES = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "PrepareEpochFence", "Dead"}
CLUSTER_CONFIGS = {
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "offsets.topic.num.partitions": 1,
    "min.insync.replicas": 2,
}


def txn_state_led(m: MetadataView) -> bool:
    parts = m.topics.get(TRANSACTION_STATE_TOPIC, {})
    return len(parts) == TXN_PARTITIONS and all(
        p.leader > 0 and len(p.isr) == 3 for p in parts.values())


def coordinator_of(cluster: ClusterProcess, txn_id: str) -> int:
    view = cluster.wait_until(txn_state_led, "__transaction_state led by 3-replica ISRs")
    return view.topics[TRANSACTION_STATE_TOPIC][
        transaction_log_partition(txn_id, TXN_PARTITIONS)].leader


def create_topic_led_by_others(cluster: ClusterProcess, coordinator: int) -> tuple[int, int]:
    """Two partitions, rf 3, led by the two brokers other than ``coordinator``."""
    first, second = sorted(set(cluster.brokers) - {coordinator})
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    assignment = [[first, second, coordinator], [second, first, coordinator]]
    admin.create_topics([NewTopic(TOPIC, 2, replica_assignment=assignment)])[TOPIC].result(30)
    cluster.wait_until(
        lambda m: m.leaders(TOPIC) == {0: first, 1: second}
        and all(len(p.isr) == 3 for p in m.topics[TOPIC].values()),
        "the topic led by the non-coordinators")
    return first, second


def wait_coordinator_moved(cluster: ClusterProcess, coordinator: int, txn_id: str) -> int:
    index = transaction_log_partition(txn_id, TXN_PARTITIONS)
    view = cluster.wait_until(
        lambda m: coordinator not in m.brokers
        and m.topics[TRANSACTION_STATE_TOPIC][index].leader not in (coordinator, -1),
        "the coordinator's __transaction_state partition moved", timeout=60)
    return view.topics[TRANSACTION_STATE_TOPIC][index].leader


def wait_state(bootstrap: str, txn_id: str, states: set[str], timeout: float = 60) -> str:
    """DescribeTransactions until the id's state is one of ``states``."""
    deadline = time.monotonic() + timeout
    last = "?"
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        while time.monotonic() < deadline:
            try:
                last = admin.describe_transactions([txn_id])[txn_id].state
            except Exception as exc:  # coordinator loading / moving: ask again
                last = repr(exc)
            if last in states:
                return last
            time.sleep(0.2)  # polling interval
    raise AssertionError(f"{txn_id}: state {last}, not {states} within {timeout:.0f}s")


def wait_stable_end(bootstrap: str, ends: dict[int, int], timeout: float = 60) -> None:
    """Until the last stable offset of each partition is its end offset (``ends``): every
    marker written and replicated, nothing left open."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crashcoord-lso",
                         "isolation.level": "read_committed"})
    deadline = time.monotonic() + timeout
    seen: dict[int, int] = {}
    try:
        while time.monotonic() < deadline:
            try:
                seen = {p: consumer.get_watermark_offsets(CkTopicPartition(TOPIC, p),
                                                          timeout=5, cached=False)[1]
                        for p in ends}
            except KafkaException:
                seen = {}
            if seen == ends:
                return
            time.sleep(0.2)  # polling interval
    finally:
        consumer.close()
    raise AssertionError(f"last stable offsets {seen}, not {ends}, within {timeout:.0f}s")


def read(bootstrap: str, committed: bool, ends: dict[int, int]) -> list[bytes]:
    """Every record of ``TOPIC`` below ``ends``, read_committed or read_uncommitted."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "crashcoord-read",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed" if committed
                         else "read_uncommitted"})
    consumer.assign([CkTopicPartition(TOPIC, p, 0) for p in ends])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while at_end != set(ends) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if (error := msg.error()) is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(int(msg.partition() or 0))
                continue
            values.append(bytes(msg.value() or b""))
    finally:
        consumer.close()
    assert at_end == set(ends), f"not at the end of {set(ends) - at_end}"
    return values


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_coordinator_killed_after_prepare_before_markers(
    cluster_factory: ClusterFactory, commit: bool
) -> None:
    txn_id = f"crashcoord-{'commit' if commit else 'abort'}"
    # The periodic sweep (which also restarts the markers of a prepared transaction nobody
    # is completing) is pushed past the test: the new coordinator must finish the
    # transaction because it loaded it (Kafka's onElection), not minutes later.
    configs = {**CLUSTER_CONFIGS,
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300000}
    cluster = cluster_factory(configs=configs, env={"ONCELOG_CRASH_AT": CRASH_POINT})
    coordinator = coordinator_of(cluster, txn_id)
    create_topic_led_by_others(cluster, coordinator)

    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
                         "transaction.timeout.ms": 60000, "acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    written = [f"p{p}-{i}".encode() for p in (0, 1) for i in range(PER_PARTITION)]
    for value in written:
        producer.produce(TOPIC, value=value, partition=int(value[1:2]))
    assert producer.flush(30) == 0

    # The coordinator dies at the crash point, after Prepare* is acknowledged by the ISR
    # and before any marker. confluent-kafka's answer: either the end succeeds (its retries
    # reach the new coordinator, which finished it) or a retriable/abortable error.
    error: KafkaException | None = None
    try:
        if commit:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    except KafkaException as exc:
        error = exc
    broker = cluster.brokers[coordinator]
    deadline = time.monotonic() + 30
    while broker.is_running and time.monotonic() < deadline:
        time.sleep(0.05)  # polling interval
    assert broker.kill() == -9, "the coordinator did not die at the crash point"  # reaps it
    assert f"crash point {CRASH_POINT} reached" in broker.log_text(since_start=True)
    if error is not None:
        kafka_error = error.args[0]
        assert not kafka_error.fatal(), kafka_error
        print(f"confluent-kafka's end of transaction: {kafka_error}")
    else:
        print("confluent-kafka's end of transaction: succeeded")

    new_coordinator = wait_coordinator_moved(cluster, coordinator, txn_id)
    assert new_coordinator != coordinator
    expected = "CompleteCommit" if commit else "CompleteAbort"
    assert wait_state(cluster.bootstrap, txn_id, {expected, "Empty"}, timeout=30) == expected
    ends = {0: PER_PARTITION + 1, 1: PER_PARTITION + 1}  # the records and one marker
    wait_stable_end(cluster.bootstrap, ends, timeout=30)
    assert sorted(read(cluster.bootstrap, False, ends)) == sorted(written)
    assert sorted(read(cluster.bootstrap, True, ends)) == (sorted(written) if commit else [])
    producer.flush(5)


# What a transactional client may be answered while its coordinator fails over (Kafka's
# TransactionCoordinator): FindCoordinator names the partition's leader, the dead broker too
# until its registration lapses, or COORDINATOR_NOT_AVAILABLE; EndTxn is retriable until the
# new coordinator has completed the transaction, then NONE.
RETRIABLE_END_TXN = frozenset({
    ErrorCode.none, ErrorCode.not_coordinator, ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions,
})
FIND_COORDINATOR = frozenset({ErrorCode.none, ErrorCode.coordinator_not_available})
# From the new coordinator's election to kafka-python's commit returning: the marker wait of
# EndTxn (5 s at most) and a few of the client's backoffs (100 ms).
COMMIT_BOUND_S = 10.0
KAFKA_PYTHON_LOGGERS = ("kafka.producer.transaction_manager", "kafka.producer.sender")


class TxnExchange(logging.Handler):
    """kafka-python's transactional requests and the broker's answers, as its transaction
    manager and sender log them at DEBUG: each request taken from the queue, each answer
    (the response itself), each lost connection and each coordinator it could not reach."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.events: list[tuple[float, str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        template = str(record.msg)
        if template.startswith("Request %s dequeued for sending"):
            self.events.append((record.created, "dequeued", type(args[0]).__name__))
        elif template.startswith("Received transactional response"):
            self.events.append((record.created, "answer", args[0]))
        elif template.startswith("Disconnected from node"):
            self.events.append((record.created, "disconnected", None))
        elif "Got an exception when trying to find a node" in template:
            self.events.append((record.created, "unreachable", args[-1]))

    @contextmanager
    def capturing(self) -> Iterator[None]:
        loggers = [logging.getLogger(name) for name in KAFKA_PYTHON_LOGGERS]
        levels = [lg.level for lg in loggers]
        for lg in loggers:
            lg.setLevel(logging.DEBUG)
            lg.addHandler(self)
        try:
            yield
        finally:
            for lg, level in zip(loggers, levels, strict=True):
                lg.removeHandler(self)
                lg.setLevel(level)

    def answers(self, kind: str) -> list[tuple[float, ErrorCode, int]]:
        """(wall time, error, coordinator node or -1) of each ``kind`` answer
        (``FindCoordinatorResponse``, ``EndTxnResponse``)."""
        found = []
        for at, what, detail in self.events:
            if what == "answer" and type(detail).__name__ == kind:
                result = detail.coordinators[0] if getattr(detail, "coordinators", None) \
                    else detail
                found.append((at, ErrorCode(result.error_code),
                              int(getattr(result, "node_id", -1))))
        return found

    def describe(self, since: float) -> str:
        lines = []
        for at, what, detail in self.events:
            if what == "answer":
                name = type(detail).__name__
                result = detail.coordinators[0] if getattr(detail, "coordinators", None) \
                    else detail
                text = f"{name} {ErrorCode(result.error_code).name}"
                if hasattr(result, "node_id"):
                    text += f" node {result.node_id}"
            else:
                text = f"{what} {detail or ''}"
            lines.append(f"  {at - since:+8.3f}s {text}")
        return "\n".join(lines)

    def end_txn_dropped(self) -> bool:
        """kafka-python 3.0.x's sender: the coordinator's connection failed with an exception
        (``await_ready`` raises) after EndTxn was taken from the queue, and neither an
        answer nor another EndTxn followed."""
        last_end = max((i for i, (_, what, detail) in enumerate(self.events)
                        if what == "dequeued" and detail == "EndTxnRequest"), default=-1)
        after = self.events[last_end + 1:]
        return last_end >= 0 and any(what == "unreachable" for _, what, _ in after) and not any(
            (what == "dequeued" and detail == "EndTxnRequest")
            or (what == "answer" and type(detail).__name__ == "EndTxnResponse")
            for _, what, detail in after)


def retry_coordinator_connect_errors(producer: KafkaProducer) -> None:
    """kafka-python's sender as its master branch has it (dpkp/kafka-python 7c5003a5): a
    coordinator it cannot connect to is looked up again and the request is retried. In 3.0.x
    ``await_ready`` raises KafkaConnectionError instead of returning False; the sender's
    ``except`` branch then looks the coordinator up but never queues the request again."""
    client = producer._sender._client
    await_ready = client.await_ready

    def ready_or_false(node_id: Any, timeout_ms: int = 30000) -> bool:
        try:
            return bool(await_ready(node_id, timeout_ms=timeout_ms))
        except KafkaConnectionError:
            return False

    client.await_ready = ready_or_false


@pytest.mark.parametrize("retry_connect_errors", [False, True],
                         ids=["as-released", "connect-errors-retried"])
def test_kafka_python_commit_across_coordinator_failover(
    cluster_factory: ClusterFactory, retry_connect_errors: bool
) -> None:
    """Issue 25, item 6: kafka-python's ``commit_transaction()`` blocked for good when the
    coordinator died after a durable PrepareCommit and the new one completed the transaction.

    The broker answers right and in time: FindCoordinator names the dead broker only while
    its registration lives (as Kafka names a broker until it is fenced), then the new
    coordinator, which has completed the transaction from PrepareCommit within seconds of its
    election and answers the retried EndTxn NONE. kafka-python 3.0.x never retries it: its
    sender takes EndTxn from the queue, ``await_ready`` on the dead coordinator raises, and
    the ``except`` branch looks the coordinator up without putting EndTxn back, so nothing
    completes the call. With that fixed as on kafka-python's master
    (``connect-errors-retried``) ``commit_transaction()`` returns within seconds of the
    election. Either way read_committed consumers see the transaction once."""
    txn_id = "crashcoord-kafka-python"
    configs = {**CLUSTER_CONFIGS,
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300000}
    cluster = cluster_factory(configs=configs, env={"ONCELOG_CRASH_AT": CRASH_POINT})
    coordinator = coordinator_of(cluster, txn_id)
    create_topic_led_by_others(cluster, coordinator)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=txn_id,
                             transaction_timeout_ms=60000, acks="all")
    if retry_connect_errors:
        retry_coordinator_connect_errors(producer)
    exchange = TxnExchange()
    outcome: list[BaseException | None] = []
    returned = threading.Event()

    def commit() -> None:  # kafka-python's commit_transaction() takes no timeout
        try:
            producer.commit_transaction()
            outcome.append(None)
        except Exception as exc:
            outcome.append(exc)
        finally:
            returned.set()

    try:
        producer.init_transactions()
        producer.begin_transaction()
        written = [f"p{p}-{i}".encode() for p in (0, 1) for i in range(PER_PARTITION)]
        for value in written:
            producer.send(TOPIC, value=value, partition=int(value[1:2]))
        producer.flush(timeout=30)
        with exchange.capturing():
            started = time.time()
            threading.Thread(target=commit, name="kafka-python-commit", daemon=True).start()
            broker = cluster.brokers[coordinator]
            deadline = time.monotonic() + 30
            while broker.is_running and time.monotonic() < deadline:
                time.sleep(0.05)  # polling interval
            assert broker.kill() == -9, "the coordinator did not die at the crash point"
            assert f"crash point {CRASH_POINT} reached" in broker.log_text(since_start=True)
            new_coordinator = wait_coordinator_moved(cluster, coordinator, txn_id)
            elected = time.time()
            returned.wait(COMMIT_BOUND_S)
        print(f"kafka-python's transactional exchange from EndTxn on (coordinator {coordinator} "
              f"killed, {new_coordinator} elected at +{elected - started:.3f}s):\n"
              f"{exchange.describe(started)}")

        # What the brokers answered: nothing but retriable errors and NONE, and the dead
        # broker named as coordinator only until the new one was elected.
        for at, code, node in exchange.answers("FindCoordinatorResponse"):
            assert code in FIND_COORDINATOR, code
            assert node != coordinator or at < elected, f"{node} named at +{at - started:.3f}s"
        for _, code, _ in exchange.answers("EndTxnResponse"):
            assert code in RETRIABLE_END_TXN, code
        if returned.is_set():
            assert outcome == [None], outcome
            print(f"commit_transaction() returned {time.time() - elected:.3f}s after the "
                  "election")
        else:
            assert not retry_connect_errors, (
                f"commit_transaction() still blocked {COMMIT_BOUND_S}s after the election")
            # kafka-python 3.0.x: EndTxn dropped on the coordinator's failed connection, no
            # request left to complete the call (nothing queued, nothing in flight).
            assert exchange.end_txn_dropped(), exchange.describe(started)
            manager = producer._transaction_manager
            assert not manager.has_in_flight_transactional_request()
            assert not [h for *_, h in manager._pending_requests
                        if type(h).__name__ == "EndTxnHandler"]
            print("commit_transaction() blocked: kafka-python dropped its EndTxn on the dead "
                  "coordinator's refused connection and sent nothing since")

        # The broker's side, whatever the client did: the new coordinator completed the
        # transaction from PrepareCommit, and read_committed sees it once.
        assert wait_state(cluster.bootstrap, txn_id, {"CompleteCommit", "Empty"},
                          timeout=30) == "CompleteCommit"
        ends = {0: PER_PARTITION + 1, 1: PER_PARTITION + 1}
        wait_stable_end(cluster.bootstrap, ends, timeout=30)
        assert sorted(read(cluster.bootstrap, True, ends)) == sorted(written)
    finally:
        producer.close(timeout=2)


def test_prepared_2pc_transaction_survives_coordinator_failover(
    cluster_factory: ClusterFactory,
) -> None:
    """KIP-939: a prepared transaction is kept by the new coordinator (never timed out, even
    well past transaction.max.timeout.ms) and committed by a new client instance."""
    txn_id = "crashcoord-2pc"
    max_timeout_ms = 1500
    cluster = cluster_factory(configs={
        **CLUSTER_CONFIGS,
        "transaction.two.phase.commit.enable": True,
        "transaction.max.timeout.ms": max_timeout_ms,
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200,
    })
    coordinator = coordinator_of(cluster, txn_id)
    create_topic_led_by_others(cluster, coordinator)
    config = {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id,
              "transaction.two.phase.commit.enable": True, "transaction.timeout.ms": 1000}
    written = [f"p{p}-2pc".encode() for p in (0, 1)]
    first = OncelogProducer(config)
    try:
        first.init_transactions(timeout=30)
        first.begin_transaction()
        for p, value in enumerate(written):
            first.send(TOPIC, value, partition=p)
        state = first.prepare_transaction(timeout=30)
        cluster.kill(coordinator)
    finally:
        first.close()
    new_coordinator = wait_coordinator_moved(cluster, coordinator, txn_id)
    assert new_coordinator != coordinator

    # The new coordinator has it (loaded), and keeps it Ongoing past the max timeout and
    # many abort sweeps: checked over the whole window, not once at its end.
    assert wait_state(cluster.bootstrap, txn_id, STATES) == "Ongoing"
    with Admin({"bootstrap.servers": cluster.bootstrap}) as admin:
        until = time.monotonic() + 2 * max_timeout_ms / 1000
        while time.monotonic() < until:
            described = admin.describe_transactions([txn_id])[txn_id]
            assert described.state == "Ongoing", described
            assert described.two_phase_commit, described
            time.sleep(0.2)  # polling interval
    assert read(cluster.bootstrap, True, {0: 1, 1: 1}) == []  # LSO held by the open txn

    second = OncelogProducer({**config, "bootstrap.servers": cluster.bootstrap})
    try:
        second.init_transactions(keep_prepared_txn=True, timeout=60)
        assert second.prepared_state == state
        second.complete_transaction(state, timeout=60)
    finally:
        second.close()
    assert wait_state(cluster.bootstrap, txn_id, {"CompleteCommit", "Empty"}) == "CompleteCommit"
    ends = {0: 2, 1: 2}
    wait_stable_end(cluster.bootstrap, ends)
    assert sorted(read(cluster.bootstrap, True, ends)) == sorted(written)
