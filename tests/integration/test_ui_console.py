"""The transactions console over HTTP, without a browser: ``oncelog serve --ui`` and
``oncelog ui --bootstrap-server`` (against oncelog and the reference Kafka). The snapshot
names the transaction holding a partition's LSO; abort and force-terminate need a one-use
confirmation token; errors are JSON with the Kafka error name."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from oncelog.harness.net import free_port, wait_for_port
from tests.support.console import (
    confirmed,
    console_broker,
    http,
    partition_row,
    state,
    wait_for_state,
)
from tests.support.kafka import KafkaProcess
from tests.support.names import unique_name, unique_topic

BrokerFactory = Callable[..., BrokerProcess]
TWO_PC = {"transaction.two.phase.commit.enable": True}


def make_topic(bootstrap: str, partitions: int = 1) -> str:
    topic = unique_topic("ui")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    return topic


def open_transaction(bootstrap: str, topic: str, txn_id: str, **extra: object) -> Producer:
    """A transaction with one record on partition 0, then a plain record after it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, **extra})
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"in-txn", partition=0)
    producer.flush()
    with Producer({"bootstrap.servers": bootstrap}) as plain:
        plain.send(topic, b"after", partition=0).result(10)
    return producer


def test_state_names_the_transaction_holding_the_lso_and_abort_releases_it(
    broker_factory: BrokerFactory,
) -> None:
    broker, base = console_broker(broker_factory)
    topic = make_topic(broker.bootstrap)
    txn_id = unique_name("stuck")
    producer = open_transaction(broker.bootstrap, topic, txn_id)
    try:
        stuck = partition_row(state(base), topic)
        assert (stuck["high_watermark"], stuck["lso"], stuck["gap"]) == (2, 0, 2)
        assert stuck["blocking"]["transactional_id"] == txn_id
        assert stuck["blocking"]["producer_id"] == producer.producer_id
        assert stuck["blocking"]["start_offset"] == 0
        [txn] = [t for t in state(base)["transactions"] if t["transactional_id"] == txn_id]
        assert txn["state"] == "Ongoing" and txn["partitions"] == [f"{topic}-0"]
        assert txn["producer_id"] == producer.producer_id and not txn["two_phase_commit"]
        assert txn["timeout_ms"] == 60000 and txn["age_ms"] >= 0

        target = {"transactional_id": txn_id}
        # No token, a token for another target, a token used twice: refused, nothing done.
        assert http(f"{base}/api/abort", target)[1]["error"] == "CONFIRMATION_REQUIRED"
        _, other = http(f"{base}/api/confirm", {"action": "abort", "transactional_id": "x"})
        status, answer = http(f"{base}/api/abort", {"token": other["token"], **target})
        assert (status, answer["error"]) == (403, "CONFIRMATION_REQUIRED")
        _, wrong_action = http(f"{base}/api/confirm", {"action": "force-terminate", **target})
        status, answer = http(f"{base}/api/abort", {"token": wrong_action["token"], **target})
        assert (status, answer["error"]) == (403, "CONFIRMATION_REQUIRED")
        assert partition_row(state(base), topic)["gap"] == 2

        assert confirmed(base, "abort", target)["ok"] is True
        done = wait_for_state(base, lambda s: partition_row(s, topic)["gap"] == 0)
        row = partition_row(done, topic)
        assert row["lso"] == row["high_watermark"] == 3  # the two records and the ABORT marker
        assert row["blocking"] is None
        assert [t for t in done["transactions"] if t["transactional_id"] == txn_id] == []
    finally:
        producer.close()


def test_prepared_2pc_transaction_is_refused_by_abort_and_ended_by_force_terminate(
    broker_factory: BrokerFactory,
) -> None:
    broker, base = console_broker(broker_factory, **TWO_PC)
    topic = make_topic(broker.bootstrap)
    txn_id = unique_name("prepared")
    producer = open_transaction(broker.bootstrap, topic, txn_id,
                                **{"transaction.two.phase.commit.enable": True})
    try:
        producer.prepare_transaction()
        [txn] = [t for t in state(base)["transactions"] if t["transactional_id"] == txn_id]
        assert txn["two_phase_commit"] is True and txn["timeout_ms"] == 2**31 - 1
        assert partition_row(state(base), topic)["blocking"]["two_phase_commit"] is True

        target = {"transactional_id": txn_id}
        _, token = http(f"{base}/api/confirm", {"action": "abort", **target})
        assert "fence" in token["summary"]
        status, answer = http(f"{base}/api/abort", {"token": token["token"], **target})
        assert (status, answer["error"]) == (409, "INVALID_TXN_STATE")
        assert "two-phase-commit" in answer["message"]
        assert partition_row(state(base), topic)["gap"] == 2

        confirmed(base, "force-terminate", target)
        wait_for_state(base, lambda s: partition_row(s, topic)["gap"] == 0)
    finally:
        producer.close()


def test_groups_lag_page_and_request_errors(broker_factory: BrokerFactory) -> None:
    broker, base = console_broker(broker_factory)
    topic = make_topic(broker.bootstrap, partitions=2)
    group = unique_name("lagging")
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for i in range(5):
            producer.send(topic, b"%d" % i, partition=0)
        producer.send(topic, b"x", partition=1)
        producer.flush()
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group}) as consumer:
        consumer.commit({TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 1})
    [entry] = [g for g in state(base)["groups"] if g["group_id"] == group]
    lags = {(p["topic"], p["partition"]): (p["committed"], p["high_watermark"], p["lag"])
            for p in entry["partitions"]}
    assert lags == {(topic, 0): (2, 5, 3), (topic, 1): (1, 1, 0)}
    assert entry["lag"] == 3

    status, page = _get(f"{base}/")
    assert status == 200 and "<title>oncelog transactions console</title>" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # no external asset
    assert http(f"{base}/nope")[0] == 404
    assert http(f"{base}/api/state", {})[1]["error"] == "METHOD_NOT_ALLOWED"
    status, answer = http(f"{base}/api/confirm", {"action": "abort"}, content_type="text/plain")
    assert (status, answer["error"]) == (415, "BAD_REQUEST")
    status, answer = http(f"{base}/api/confirm", {"action": "explode", "transactional_id": "t"})
    assert (status, answer["error"]) == (400, "BAD_REQUEST")
    # A Kafka error comes back by its name.
    missing = {"transactional_id": unique_name("never")}
    _, token = http(f"{base}/api/confirm", {"action": "force-terminate", **missing})
    status, answer = http(f"{base}/api/force-terminate", {"token": token["token"], **missing})
    assert status == 200 or answer["error"].isupper(), answer


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def test_serve_refuses_to_start_when_the_console_address_is_busy(
    broker_factory: BrokerFactory,
) -> None:
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        broker = broker_factory(start=False, extra_args=["--ui", f"127.0.0.1:{port}"])
        result = subprocess.run(
            [sys.executable, "-m", "oncelog.cli.main", "serve", "--data-dir",
             str(broker.data_dir), "--listen", f"127.0.0.1:{free_port()}",
             "--ui", f"127.0.0.1:{port}"],
            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
        )
    assert result.returncode == 1, result
    assert "Traceback" not in result.stderr
    assert f"the console address 127.0.0.1:{port} cannot be bound" in result.stderr
    assert "ready" not in result.stdout


# ------------------------------------------------------------------ oncelog ui


@contextmanager
def ui_process(bootstrap: str, *extra: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "oncelog.cli.main", "ui", "--bootstrap-server", bootstrap,
         "--listen", f"127.0.0.1:{port}", *extra],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == f"oncelog console on http://127.0.0.1:{port}/"
        assert wait_for_port("127.0.0.1", port, 10)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(10)


def test_oncelog_ui_finds_and_aborts_a_hanging_transaction(broker_factory: BrokerFactory) -> None:
    """A real hanging transaction (its coordinator lost ``__transaction_state``), shown by
    ``oncelog ui`` and aborted from it with a WriteTxnMarkers ABORT."""
    broker = broker_factory()
    topic = make_topic(broker.bootstrap)
    producer = open_transaction(broker.bootstrap, topic, unique_name("lost"))
    producer.close()
    broker.stop()
    for directory in broker.data_dir.glob("__transaction_state-*"):
        shutil.rmtree(directory)
    broker.start()
    with ui_process(broker.bootstrap, "--max-transaction-timeout", "0") as base:
        snapshot = wait_for_state(base, lambda s: any(h["topic"] == topic for h in s["hanging"]))
        [hanging] = [h for h in snapshot["hanging"] if h["topic"] == topic]
        assert (hanging["partition"], hanging["start_offset"]) == (0, 0)
        assert partition_row(snapshot, topic)["blocking"]["transactional_id"] is None
        target = {k: hanging[k] for k in ("topic", "partition", "producer_id", "producer_epoch",
                                          "coordinator_epoch")}
        confirmed(base, "abort", target)
        done = wait_for_state(base, lambda s: partition_row(s, topic)["gap"] == 0)
        assert [h for h in done["hanging"] if h["topic"] == topic] == []


def test_oncelog_ui_against_the_reference_kafka(kafka_broker: KafkaProcess) -> None:
    topic = make_topic(kafka_broker.bootstrap)
    txn_id = unique_name("kafka")
    producer = open_transaction(kafka_broker.bootstrap, topic, txn_id)
    try:
        with ui_process(kafka_broker.bootstrap) as base:
            row = partition_row(state(base), topic)
            assert (row["high_watermark"], row["lso"], row["gap"]) == (2, 0, 2)
            assert row["blocking"]["transactional_id"] == txn_id
            confirmed(base, "abort", {"transactional_id": txn_id})
            wait_for_state(base, lambda s: partition_row(s, topic)["gap"] == 0)
    finally:
        producer.close()


def test_oncelog_ui_reports_an_unreachable_broker_as_json() -> None:
    with ui_process(f"127.0.0.1:{free_port()}", "--timeout-ms", "2000") as base:
        status, answer = http(f"{base}/api/state")
    assert status == 503 and answer["error"] == "BROKER_UNREACHABLE", answer
