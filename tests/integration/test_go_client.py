"""A Go client against ``oncelog serve``: franz-go v1.22.2's ``GroupTransactSession``
(tests/go, built by ``make go-harness``) copies an input topic to an output topic, consuming
read_committed and committing the group's offsets inside each transaction, while the broker
is kill -9'd and restarted mid-run. Read read_committed, the output holds every input value
exactly once, and the group's committed offsets are the input's end."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from examples.payments.verify import read_topic
from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.fault_proxy import ApiKey, FaultRules
from tests.conftest import ProxiedBroker
from tests.support.kafka import cache_dir
from tests.support.names import unique_name, unique_topic

RECORDS = 3000
PARTITIONS = 3
PREFIX = "copied:"


def go_harness() -> Path:
    binary = cache_dir() / "go-harness" / "oncelog-go-harness"
    assert binary.exists(), f"{binary} is missing: run `make go-harness`"
    return binary


class GoCopier:
    """The Go program as a child process; its JSON progress lines are read from a file."""

    def __init__(self, log: Path, argv: list[str]) -> None:
        self.log = log
        self._out = log.open("wb")
        self.proc = subprocess.Popen(argv, stdout=self._out, stderr=subprocess.STDOUT)

    def events(self) -> list[dict[str, Any]]:
        lines = self.log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def committed_total(self) -> int:
        totals = [e["total"] for e in self.events() if e.get("event") == "committed"]
        return max(totals, default=0)

    def wait_committed(self, at_least: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while (total := self.committed_total()) < at_least:
            assert self.proc.poll() is None, f"the Go copier exited: {self.log.read_text()}"
            assert time.monotonic() < deadline, f"only {total} copied: {self.log.read_text()}"
            time.sleep(0.02)
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._out.close()


@pytest.fixture
def copier_factory(tmp_path: Path) -> Iterator[list[GoCopier]]:
    started: list[GoCopier] = []
    yield started
    for copier in started:
        copier.stop()


def produce_input(bootstrap: str, topic: str) -> list[bytes]:
    values = [f"in-{i:05d}".encode() for i in range(RECORDS)]
    with Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True}) as producer:
        for i, value in enumerate(values):
            producer.send(topic, value, key=str(i % 97).encode())
        assert producer.flush(30) == 0
    return values


def output_values(bootstrap: str, topic: str) -> list[bytes]:
    return [m.value for m in read_topic(bootstrap, topic) if m.value is not None]


@dataclass
class Copy:
    """A running copy: its topics, group, input values and the Go program doing it."""

    source: str
    sink: str
    group: str
    values: list[bytes]
    copier: GoCopier


def start_copy(
    bootstrap: str, client_bootstrap: str, copier_factory: list[GoCopier], tmp_path: Path
) -> Copy:
    """Topics and input made on ``bootstrap``; the Go copier connecting to
    ``client_bootstrap``."""
    source, sink = unique_topic("go-in"), unique_topic("go-out")
    group = unique_name("go-group")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(source, PARTITIONS)
        admin.create_topic(sink, PARTITIONS)
    values = produce_input(bootstrap, source)
    copier = GoCopier(
        tmp_path / "go-copier.log",
        [str(go_harness()), "-brokers", client_bootstrap, "-in", source, "-out", sink,
         "-group", group, "-txn-id", unique_name("go-txn"), "-prefix", PREFIX,
         "-max-poll", "50", "-txn-pause", "20ms"],
    )  # fmt: skip
    copier_factory.append(copier)
    return Copy(source, sink, group, values, copier)


def wait_all_copied(bootstrap: str, copy: Copy, timeout: float) -> None:
    """Until every input value is in the output; then stop the copier (a clean stop)."""
    deadline = time.monotonic() + timeout
    while len(set(got := output_values(bootstrap, copy.sink))) < RECORDS:
        assert copy.copier.proc.poll() is None, (
            f"the Go copier exited: {copy.copier.log.read_text()}")
        assert time.monotonic() < deadline, f"{len(set(got))}/{RECORDS} copied after the kill"
        time.sleep(0.2)
    copy.copier.stop()
    assert copy.copier.events()[-1]["event"] == "stopped", copy.copier.log.read_text()


def test_franz_go_group_transact_session_exactly_once_across_broker_kill(
    broker: BrokerProcess, copier_factory: list[GoCopier], tmp_path: Path
) -> None:
    copy = start_copy(broker.bootstrap, broker.bootstrap, copier_factory, tmp_path)
    source, sink, group, values, copier = (
        copy.source, copy.sink, copy.group, copy.values, copy.copier)

    # Kill -9 the broker once a third of the input is copied, with transactions in flight.
    before_kill = copier.wait_committed(RECORDS // 3, timeout=60)
    assert before_kill < RECORDS, "the copy finished before the broker was killed"
    broker.kill()
    broker.start()

    # The copier carries on against the restarted broker until every value is out.
    expected = sorted(PREFIX.encode() + v for v in values)
    wait_all_copied(broker.bootstrap, copy, 90)

    got = output_values(broker.bootstrap, sink)
    assert sorted(got) == expected  # every input exactly once: no loss, no duplicate
    tps = [TopicPartition(source, p) for p in range(PARTITIONS)]
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as consumer:
        committed = consumer.committed(tps)
        ends = consumer.end_offsets(tps)
    assert {tp: (o.offset if o else None) for tp, o in committed.items()} == ends


def wait_for(condition: Any, what: str, copier: GoCopier, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert copier.proc.poll() is None, f"the Go copier exited: {copier.log.read_text()}"
        assert time.monotonic() < deadline, f"no {what}: {copier.log.read_text()}"
        time.sleep(0.02)


def test_franz_go_session_ends_a_failed_end_with_an_abort_before_the_next_begin(
    proxied_broker: ProxiedBroker, copier_factory: list[GoCopier], tmp_path: Path
) -> None:
    """The broker dies under an EndTxn (forced: its response is held by the proxy, then the
    broker is killed and the proxy refuses connections until End has failed): End returns a
    transport error with the transaction still open in the client, and the copier must end
    it with End(TryAbort) (franz-go's documented retry) before its next Begin, then carry on
    exactly once against the restarted broker."""
    broker, proxy = proxied_broker.broker, proxied_broker.proxy
    copy = start_copy(broker.bootstrap, proxy.bootstrap, copier_factory, tmp_path)
    copier = copy.copier
    copier.wait_committed(1, timeout=60)

    held = proxy.stats().responses_delayed.get(ApiKey.END_TXN, 0)
    proxy.set_rules(FaultRules(delay={ApiKey.END_TXN: 120.0}))
    wait_for(lambda: proxy.stats().responses_delayed.get(ApiKey.END_TXN, 0) > held,
             "EndTxn response held", copier, 60)
    broker.kill()
    proxy.set_rules(FaultRules(refuse=True))
    proxy.cut_all()  # the held EndTxn response dies with its connection
    wait_for(lambda: any(e.get("event") == "aborted" and e.get("error")
                         for e in copier.events()), "End failing", copier, 120)
    proxy.set_rules(None)
    broker.start()

    wait_all_copied(broker.bootstrap, copy, 120)
    events = copier.events()
    assert any(e["event"] == "abort-retried" for e in events), copier.log.read_text()
    assert sorted(output_values(broker.bootstrap, copy.sink)) == sorted(
        PREFIX.encode() + v for v in copy.values
    )
