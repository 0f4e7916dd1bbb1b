"""The verify fault injector (oncelog/verify/nemesis.py) against a SingleDeployment
(oncelog/verify/spawn.py): each single-node kind really hits the broker (or a worker), is
recorded, and after the heal a confluent-kafka transactional producer commits again."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from oncelog.client import Admin
from oncelog.verify.faults import PlannedFault, cut_mode
from oncelog.verify.history import Fault
from oncelog.verify.nemesis import Nemesis
from oncelog.verify.spawn import SingleDeployment
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration


class FakeWorkers:
    def __init__(self) -> None:
        self.crashed: list[str] = []

    def crash_one(self, rng: random.Random) -> str | None:
        name = f"worker-{rng.randrange(4)}"
        self.crashed.append(name)
        return name


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SingleDeployment]:
    deployment = SingleDeployment(tmp_path_factory.mktemp("verify-single"))
    try:
        yield deployment
    finally:
        deployment.close()


def transactional_producer(bootstrap: str, txid: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txid,
                         "transaction.timeout.ms": 10000, "message.timeout.ms": 10000})
    producer.init_transactions(30)
    return producer


def commit_one(producer: Producer, topic: str, value: str) -> None:
    """One transaction of one record; retried (abortable errors) until a commit returns."""
    deadline = time.monotonic() + 40
    while True:
        try:
            producer.begin_transaction()
            producer.produce(topic, value.encode())
            producer.commit_transaction(20)
            return
        except Exception as exc:
            if time.monotonic() > deadline or not getattr(exc.args[0], "txn_requires_abort",
                                                          lambda: True)():
                raise
            producer.abort_transaction(20)


def state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def paused(pid: int, timeout: float = 5.0) -> bool:
    """True once the process is stopped (SIGSTOP takes effect asynchronously)."""
    deadline = time.monotonic() + timeout
    while state(pid) != "T":
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # polling /proc, not synchronisation
    return True


@pytest.mark.parametrize(("kind", "pick"), [
    ("kill", 0), ("pause", 0), ("cut", 0), ("cut", 1), ("cut", 2), ("client-crash", 5),
])
def test_single_node_fault_hits_is_recorded_and_heals(
        single: SingleDeployment, kind: str, pick: int) -> None:
    topic = unique_topic("verify-faults")
    with Admin({"bootstrap.servers": single.bootstrap}) as admin:
        admin.create_topic(topic, 1)
    producer = transactional_producer(single.bootstrap, f"verify-faults-{kind}-{pick}")
    commit_one(producer, topic, "before")
    workers = FakeWorkers()
    nemesis = Nemesis([], single, workers, started_at=time.time())
    cut_before = single.proxy.stats().connections_cut
    pid = single.process.pid
    assert pid is not None

    active = nemesis.start(PlannedFault(0.0, kind, 1.0, pick))
    if kind == "kill":
        assert not single.process.is_running
    elif kind == "pause":
        assert paused(pid)
    elif kind == "cut":
        assert single.proxy.stats().connections_cut > cut_before  # the producer's
        rules = single.proxy.rules
        assert {"drop-responses": bool(rules.drop_next),
                "cut-after-bytes": rules.cut_after_bytes is not None,
                "refuse": rules.refuse}[cut_mode(pick)]
    else:
        assert workers.crashed == [active.fault.target]

    recorded: list[Fault] = []
    nemesis.end(active, recorded.append)
    assert [f.kind for f in recorded] == [kind]
    fault = recorded[0]
    assert fault.end is not None and fault.start <= fault.end and fault.detail
    assert single.process.is_running and state(single.process.pid or 0) != "T"
    assert single.proxy.rules.drop_next == {} and not single.proxy.rules.refuse
    commit_one(producer, topic, "after")


def test_run_follows_the_plan_and_heals_on_stop(single: SingleDeployment) -> None:
    """``run`` injects each planned fault in order and records it with start < end; set
    ``stop`` in the middle of a long hold and the broker is back when ``run`` returns."""
    plan = [PlannedFault(0.2, "cut", 0.5, 2), PlannedFault(1.0, "pause", 0.5, 0),
            PlannedFault(2.0, "client-crash", 0.0, 1), PlannedFault(2.2, "kill", 60.0, 0)]
    nemesis = Nemesis(plan, single, FakeWorkers(), started_at=time.time())
    recorded: list[Fault] = []
    stop = threading.Event()
    runner = threading.Thread(target=nemesis.run, args=(stop, recorded.append))
    runner.start()
    try:
        deadline = time.monotonic() + 20
        while single.process.is_running:  # the kill, 2.2 s in
            assert time.monotonic() < deadline, f"the kill never came: {recorded}"
            time.sleep(0.05)  # polling the process, not synchronisation
    finally:
        stop.set()
        runner.join(60)
    assert not runner.is_alive()
    assert [f.kind for f in recorded] == ["cut", "pause", "client-crash", "kill"]
    for fault in recorded:
        if fault.kind != "client-crash":
            assert fault.end is not None and fault.start < fault.end, fault
    assert recorded[3].end is not None and recorded[3].end < 30  # healed at stop, not at 62 s
    assert single.process.is_running
    single.wait_serving(5)
