"""``oncelog serve --metrics HOST:PORT`` and ``oncelog metrics``: values follow the broker's
transactions (open -> active count, oldest age, longest-open with its 2PC flag; committed ->
back to zero), partitions' LSO and high watermark, live producer ids."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from oncelog.cli.metrics import Metric, parse
from oncelog.client import Admin, Producer
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from oncelog.harness.net import free_port, wait_for_port
from tests.support.names import unique_name, unique_topic

BrokerFactory = Callable[..., BrokerProcess]


def metrics_broker(broker_factory: BrokerFactory, **configs: object) -> tuple[BrokerProcess, str]:
    port = free_port()
    broker = broker_factory(configs=configs, extra_args=["--metrics", f"127.0.0.1:{port}"])
    assert wait_for_port("127.0.0.1", port, 10), "metrics endpoint did not open"
    return broker, f"http://127.0.0.1:{port}/metrics"


def scrape(url: str) -> list[Metric]:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        return parse(response.read().decode())


def value(metrics: list[Metric], name: str, **labels: str) -> float:
    found = [m for m in metrics if m.name == name and all(m.labels.get(k) == v
                                                           for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return float(found[0].value)


def samples(metrics: list[Metric], name: str) -> list[Metric]:
    return [m for m in metrics if m.name == name]


def test_metrics_follow_an_open_then_committed_transaction(
    broker_factory: BrokerFactory,
) -> None:
    broker, url = metrics_broker(broker_factory, **{"transaction.two.phase.commit.enable": True})
    topic = unique_topic("metrics")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 2)
    before = scrape(url)
    assert value(before, "oncelog_transactions_active") == 0
    assert value(before, "oncelog_transaction_oldest_open_age_ms") == 0
    assert samples(before, "oncelog_transaction_longest_open") == []
    assert value(before, "oncelog_partition_last_stable_offset", topic=topic, partition="0") == 0

    txn_id, tpc_id = unique_name("m"), unique_name("m2pc")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    tpc = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": tpc_id,
                    "transaction.two.phase.commit.enable": True})
    try:
        tpc.init_transactions()
        tpc.begin_transaction()
        tpc.send(topic, b"2pc", partition=1).result(10)
        prepared = tpc.prepare_transaction()
        time.sleep(0.05)
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"v%d" % i, partition=0)
        producer.flush()
        time.sleep(0.05)

        during = scrape(url)
        assert value(during, "oncelog_transactions_active") == 2
        assert value(during, "oncelog_transactions_two_phase_commit_active") == 1
        assert value(during, "oncelog_transactional_ids") == 2
        assert value(during, "oncelog_transaction_oldest_open_age_ms") > 0
        # The prepared 2PC transaction began first: it is the longest open.
        (longest,) = samples(during, "oncelog_transaction_longest_open")
        assert longest.labels["transactional_id"] == tpc_id
        assert longest.labels["two_phase"] == "true"
        assert float(longest.value) >= value(during, "oncelog_transaction_oldest_open_age_ms") - 50
        assert value(during, "oncelog_partition_high_watermark", topic=topic, partition="0") == 3
        assert value(during, "oncelog_partition_last_stable_offset", topic=topic,
                     partition="0") == 0
        assert value(during, "oncelog_partition_unstable_records", topic=topic,
                     partition="0") == 3
        assert value(during, "oncelog_partition_open_transactions", topic=topic,
                     partition="0") == 1
        assert value(during, "oncelog_partition_producer_ids_live", topic=topic,
                     partition="0") == 1
        assert value(during, "oncelog_producer_ids_live") >= 2

        producer.commit_transaction()
        tpc.complete_transaction(prepared)
        deadline = time.monotonic() + 10
        while True:
            after = scrape(url)
            if value(after, "oncelog_transactions_active") == 0:
                break
            assert time.monotonic() < deadline, "transactions still active"
            time.sleep(0.1)
        assert value(after, "oncelog_transaction_oldest_open_age_ms") == 0
        assert samples(after, "oncelog_transaction_longest_open") == []
        # COMMIT marker: HW 3 records + 1 marker, LSO caught up.
        assert value(after, "oncelog_partition_high_watermark", topic=topic, partition="0") == 4
        assert value(after, "oncelog_partition_last_stable_offset", topic=topic,
                     partition="0") == 4
        assert value(after, "oncelog_partition_open_transactions", topic=topic,
                     partition="0") == 0
    finally:
        producer.close()
        tpc.close()

    # The pretty printer shows the same numbers; internal partitions only on request.
    out = subprocess.run(
        [sys.executable, "-m", "oncelog.cli.main", "metrics", "--url", url, "--grep",
         "last_stable_offset"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0].split() == ["Metric", "Labels", "Value"]
    assert f"topic={topic} partition=0" in out
    assert "__consumer_offsets" not in out
    row = next(line for line in lines if f"topic={topic} partition=0" in line)
    assert row.split()[-1] == "4"


def test_http_errors_and_bad_addresses(broker_factory: BrokerFactory) -> None:
    _broker, url = metrics_broker(broker_factory)
    base = url.rsplit("/", 1)[0]
    with pytest.raises(urllib.error.HTTPError) as not_found:
        urllib.request.urlopen(base + "/nope", timeout=10)
    assert not_found.value.code == 404
    post = urllib.request.Request(url, data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as not_allowed:
        urllib.request.urlopen(post, timeout=10)
    assert not_allowed.value.code == 405

    dead = subprocess.run(
        [sys.executable, "-m", "oncelog.cli.main", "metrics", "--url",
         f"http://127.0.0.1:{free_port()}/metrics"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert dead.returncode == 1 and "cannot fetch" in dead.stderr
    assert "Traceback" not in dead.stderr

    # A metrics address already in use: the broker says so and exits 1, no traceback.
    taken = url.split("//", 1)[1].split("/", 1)[0]
    other = broker_factory(start=False, extra_args=["--metrics", taken], start_timeout=10)
    proc = subprocess.run(other.argv(), cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "cannot serve" in proc.stderr and "Traceback" not in proc.stderr
