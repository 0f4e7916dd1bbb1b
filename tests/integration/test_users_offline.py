"""``oncelog users ... --data-dir DIR``: the first SCRAM users of a broker whose only
listener needs a SCRAM login, written before it starts (Kafka's ``kafka-storage format
--add-scram``), then used by confluent-kafka over SASL_PLAINTEXT; refused while a broker
holds the directory. The etcd form (``--metadata-etcd-endpoints``) seeds the brokers' own
login in tests/cluster/test_cluster_sasl_ssl.py, through the cluster harness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from oncelog.client import Admin
from oncelog.client.errors import AuthenticationError
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import LOOPBACK, free_port
from tests.conftest import BrokerFactory
from tests.support.cli import ok, oncelog_cli
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration


def users(*args: str, data_dir: Path, stdin: str = "") -> Any:
    return oncelog_cli("users", *args, "--data-dir", str(data_dir), stdin=stdin)


def scram_only_broker(broker_factory: BrokerFactory, data_dir: Path) -> tuple[BrokerProcess, str]:
    port = free_port(LOOPBACK)
    process = broker_factory(data_dir=data_dir, configs={
        "listeners": f"SASL_PLAINTEXT://{LOOPBACK}:{port}",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    return process, f"{LOOPBACK}:{port}"


def login(bootstrap: str, user: str, password: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password}


def produce_and_read(conf: dict[str, Any]) -> list[bytes]:
    topic = unique_topic("seeded")
    producer = Producer({**conf, "enable.idempotence": True})
    producer.produce(topic, b"hello")
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    try:
        msg = consumer.poll(30)
        assert msg is not None and msg.error() is None, msg and msg.error()
        value = msg.value()
        assert value is not None
        return [value]
    finally:
        consumer.close()


def refused(conf: dict[str, Any]) -> str:
    """oncelog.client's login error (SASL_AUTHENTICATION_FAILED) with ``conf``."""
    with pytest.raises(AuthenticationError) as caught:
        Admin(conf).list_topics()
    assert caught.value.code is not None and int(caught.value.code) == 58
    return str(caught.value)


def test_seeded_user_logs_in_to_a_scram_only_listener(broker_factory: BrokerFactory,
                                                        tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    out = ok(users("add", "alice", "--mechanism", "SCRAM-SHA-512", data_dir=data_dir,
                   stdin="alice-secret\n"))
    assert "SCRAM-SHA-512 credential of user alice set" in out
    assert "alice-secret" not in out
    listed = ok(users("list", data_dir=data_dir))
    assert [line.split() for line in listed.splitlines()[1:]] == [
        ["alice", "SCRAM-SHA-512", "4096"]]
    assert "alice-secret" not in (data_dir / "scram-credentials.json").read_text()

    broker, bootstrap = scram_only_broker(broker_factory, data_dir)
    assert produce_and_read(login(bootstrap, "alice", "alice-secret")) == [b"hello"]
    assert "Authentication failed" in refused(login(bootstrap, "alice", "wrong"))

    # The running broker holds the directory: the command says so and changes nothing.
    busy = users("add", "bob", "--mechanism", "SCRAM-SHA-512", data_dir=data_dir,
                 stdin="bob-secret\n")
    assert busy.returncode == 1
    assert "another oncelog broker is using the data directory" in busy.stderr
    broker.stop()
    assert "bob" not in ok(users("list", data_dir=data_dir))

    ok(users("remove", "alice", data_dir=data_dir))
    assert ok(users("list", data_dir=data_dir)).splitlines()[1:] == []
    broker.start()
    assert "Authentication failed" in refused(login(bootstrap, "alice", "alice-secret"))


def test_offline_usage_errors(tmp_path: Path) -> None:
    few = users("add", "alice", "--iterations", "10", data_dir=tmp_path, stdin="pw\n")
    assert few.returncode == 2 and "--iterations must be 4096..16384" in few.stderr
    missing = users("remove", "nobody", data_dir=tmp_path)
    assert missing.returncode == 1 and "user nobody: no SCRAM credential" in missing.stderr
    both = oncelog_cli("users", "list", "--data-dir", str(tmp_path),
                       "--metadata-etcd-endpoints", "127.0.0.1:2379")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr
    bad = oncelog_cli("users", "list", "--metadata-etcd-endpoints", "nohost")
    assert bad.returncode == 2 and "expected HOST:PORT" in bad.stderr
