"""Start-up of a real ``oncelog serve``: one broker per data directory, readiness only once
every listener is bound, a busy port fails before the data directory is touched, bad
configuration and damaged metadata are refused with a clear message (no traceback)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from rawkafka import RawConnection

from oncelog.harness.broker import READY, REPO_ROOT, default_argv_prefix
from oncelog.harness.net import free_port
from tests.conftest import BrokerFactory

pytestmark = pytest.mark.integration


def run_serve(
    data_dir: Path, *args: str, port: int | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``oncelog serve`` expecting it to exit by itself (a refused start)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    argv = [*default_argv_prefix(), "serve", "--data-dir", str(data_dir),
            "--listen", f"127.0.0.1:{port or free_port()}", *args]
    return subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=60, check=False)


def assert_refused(result: subprocess.CompletedProcess[str], *phrases: str) -> None:
    assert result.returncode != 0, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not READY.search(result.stdout), result.stdout
    for phrase in phrases:
        assert phrase in result.stderr, result.stderr


def alive(bootstrap: str) -> bool:
    conn = RawConnection(bootstrap)
    try:
        response = conn.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        return bool(response.error_code == ErrorCode.none)
    finally:
        conn.close()


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_second_broker_on_the_same_data_dir_is_refused(broker_factory: BrokerFactory) -> None:
    first = broker_factory()
    result = run_serve(first.data_dir)
    assert_refused(result, "another oncelog broker is using", str(first.data_dir))
    assert first.is_running
    assert alive(first.bootstrap)


def test_busy_listen_port_leaves_the_data_dir_untouched(tmp_path: Path, busy_port: int) -> None:
    data_dir = tmp_path / "data"
    result = run_serve(data_dir, port=busy_port)
    assert_refused(result, "cannot serve")
    assert not data_dir.exists()


def test_not_ready_while_the_metrics_port_is_busy(tmp_path: Path, busy_port: int) -> None:
    data_dir = tmp_path / "data"
    result = run_serve(data_dir, "--metrics", f"127.0.0.1:{busy_port}")
    assert_refused(result, "cannot serve")
    assert not data_dir.exists()


def test_missing_topics_json_is_rebuilt_and_data_stays_readable(
    broker_factory: BrokerFactory,
) -> None:
    from confluent_kafka import Consumer, Producer

    broker = broker_factory(configs={"num.partitions": 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        producer.produce("kept", value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0
    assert broker.stop() == 0
    (broker.data_dir / "topics.json").unlink()
    broker.start()
    assert "rebuilding the topic list from the partition directories" in broker.log_text(
        since_start=True
    )
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["kept"])
        values: set[bytes | None] = set()
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                values.add(message.value())
            if len(values) == 6:
                break
    finally:
        consumer.close()
    assert values == {f"v{i}".encode() for i in range(6)}


@pytest.mark.parametrize(
    ("name", "garbage"),
    [("topics.json", b"{not json"), ("meta.properties", b"\x00\x01garbage\n")],
)
def test_damaged_metadata_is_refused_with_a_message(
    broker_factory: BrokerFactory, name: str, garbage: bytes
) -> None:
    broker = broker_factory()
    assert broker.stop() == 0
    (broker.data_dir / name).write_bytes(garbage)
    assert_refused(run_serve(broker.data_dir), f"{broker.data_dir / name} is damaged")


@pytest.mark.parametrize(
    ("args", "phrase"),
    [
        (["-c", "num.partitions=0"], "num.partitions: Value must be at least 1"),
        (["-c", "message.max.bytes=-5"], "message.max.bytes: Value must be at least 0"),
        (["-c", "default.replication.factor=3"], "default.replication.factor"),
        (["-c", "log.cleanup.policy=keep"], "log.cleanup.policy"),
        (["--advertised", "0.0.0.0:9092"], "nonroutable meta-address 0.0.0.0"),
    ],
)
def test_bad_configuration_is_refused(tmp_path: Path, args: list[str], phrase: str) -> None:
    data_dir = tmp_path / "data"
    result = run_serve(data_dir, *args)
    assert_refused(result, "bad configuration", phrase)
    assert result.returncode == 2
    assert not data_dir.exists()

