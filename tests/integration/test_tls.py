"""Listeners and TLS (issue 17) against real ``oncelog serve`` processes: a PLAINTEXT
listener (the harness's ``--listen``) beside an SSL one (``-c listeners=SSL://...``),
certificates from trustme (tests/support/tls.py).

The principal a client certificate gives a connection is observed in the broker's log: the
server logs each authenticated connection as ``on listener SSL as User:<subject DN>``."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import confluent_kafka
import confluent_kafka.admin

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import LOOPBACK, free_port
from tests.conftest import BrokerFactory
from tests.support.names import unique_topic
from tests.support.tls import CLIENT_DN, TlsMaterial

REPO = Path(__file__).resolve().parents[2]


def ssl_broker(
    broker_factory: BrokerFactory, tls: TlsMaterial, **extra: str
) -> tuple[BrokerProcess, str]:
    """A broker with its PLAINTEXT listener and an SSL one; (broker, SSL bootstrap)."""
    port = free_port(LOOPBACK)
    configs: dict[str, Any] = {"listeners": f"SSL://{LOOPBACK}:{port}",
                               **tls.broker_configs(**extra)}
    return broker_factory(configs=configs), f"{LOOPBACK}:{port}"


def confluent_ssl(bootstrap: str, tls: TlsMaterial, *, cert: bool = False) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
                            "ssl.ca.location": str(tls.ca)}
    if cert:
        conf |= {"ssl.certificate.location": str(tls.client_cert),
                 "ssl.key.location": str(tls.client_key)}
    return conf


def metadata_brokers(conf: dict[str, Any]) -> dict[int, tuple[str | None, int]]:
    admin = confluent_kafka.admin.AdminClient(conf)
    md = admin.list_topics(timeout=15)
    return {b.id: (b.host, b.port) for b in md.brokers.values()}


def tls_handshake(bootstrap: str, context: ssl.SSLContext) -> None:
    """A TLS handshake with the broker, then an ApiVersions exchange; raises on failure."""
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname=host) as conn:
        # ApiVersions v0, correlation id 7, client id "t": the broker answers it.
        body = b"\x00\x12\x00\x00\x00\x00\x00\x07\x00\x01t"
        conn.sendall(len(body).to_bytes(4, "big") + body)
        # TLS 1.3 reports a refused client certificate only when data is read (an alert,
        # or the broker closing the connection).
        head = conn.recv(8)
        if len(head) < 8:
            raise ConnectionResetError("the broker closed the connection")
        assert head[4:8] == b"\x00\x00\x00\x07"  # the answer's correlation id


def client_context(tls: TlsMaterial, cert: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(tls.ca))
    if cert is not None:
        context.load_cert_chain(str(cert))
    return context


def test_two_listeners_each_advertise_their_own_endpoints(
    broker_factory: BrokerFactory, tls_material: TlsMaterial
) -> None:
    broker, ssl_bootstrap = ssl_broker(broker_factory, tls_material)
    assert metadata_brokers({"bootstrap.servers": broker.bootstrap}) == {
        1: (LOOPBACK, broker.port)}
    ssl_port = int(ssl_bootstrap.rpartition(":")[2])
    assert metadata_brokers(confluent_ssl(ssl_bootstrap, tls_material)) == {
        1: (LOOPBACK, ssl_port)}


def test_confluent_mutual_tls_produce_consume_and_principal(
    broker_factory: BrokerFactory, tls_material: TlsMaterial
) -> None:
    broker, bootstrap = ssl_broker(broker_factory, tls_material, **{
        "ssl.client.auth": "required"})
    topic = unique_topic("tls")
    conf = confluent_ssl(bootstrap, tls_material, cert=True)
    producer = confluent_kafka.Producer({**conf, "enable.idempotence": True})
    for i in range(5):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({**conf, "group.id": unique_topic("g"),
                                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value() or b"")
    consumer.close()
    assert sorted(got) == [f"v{i}".encode() for i in range(5)]
    assert f"on listener SSL as User:{CLIENT_DN}" in broker.log_text()


def test_refused_tls_clients_fail_cleanly_and_the_broker_serves_on(
    broker_factory: BrokerFactory, tls_material: TlsMaterial
) -> None:
    broker, bootstrap = ssl_broker(broker_factory, tls_material, **{
        "ssl.client.auth": "required"})
    # A plaintext Kafka client on the SSL listener: the handshake fails, nothing answers.
    host, _, port = bootstrap.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(b"\x00\x00\x00\x0d\x00\x12\x00\x00\x00\x00\x00\x07\x00\x01t")
        raw.settimeout(10)
        answer = raw.recv(64)
        assert not answer.startswith(b"\x00\x00\x00")  # no Kafka frame; a TLS alert or EOF
    # No client certificate while ssl.client.auth=required; an untrusted one.
    for cert in (None, tls_material.rogue_client):
        try:
            tls_handshake(bootstrap, client_context(tls_material, cert))
        except (ssl.SSLError, ConnectionError, OSError):
            pass
        else:
            raise AssertionError(f"a client with certificate {cert} was served")
    # A client that does not trust the broker's CA refuses it.
    untrusting = ssl.create_default_context(cafile=str(tls_material.rogue_ca))
    untrusting.load_cert_chain(str(tls_material.client))
    try:
        tls_handshake(bootstrap, untrusting)
    except ssl.SSLCertVerificationError:
        pass
    else:
        raise AssertionError("a broker certificate from an untrusted CA was accepted")
    # The broker still serves both listeners, and logged no crash.
    tls_handshake(bootstrap, client_context(tls_material, tls_material.client))
    assert metadata_brokers({"bootstrap.servers": broker.bootstrap})
    assert broker.is_running
    assert "Traceback" not in broker.log_text()


def test_ssl_client_auth_requested_without_certificate_is_anonymous(
    broker_factory: BrokerFactory, tls_material: TlsMaterial
) -> None:
    broker, bootstrap = ssl_broker(broker_factory, tls_material, **{
        "ssl.client.auth": "requested"})
    tls_handshake(bootstrap, client_context(tls_material, None))
    tls_handshake(bootstrap, client_context(tls_material, tls_material.client))
    assert f"on listener SSL as User:{CLIENT_DN}" in broker.log_text()


def test_oncelog_client_transactions_over_ssl(
    broker_factory: BrokerFactory, tls_material: TlsMaterial
) -> None:
    _, bootstrap = ssl_broker(broker_factory, tls_material)
    common = {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
              "ssl.truststore.location": str(tls_material.ca),
              "ssl.keystore.location": str(tls_material.client)}
    topic = unique_topic("tls-txn")
    with Admin(common) as admin:
        admin.create_topic(topic, 1)
    with Producer({**common, "transactional.id": unique_topic("tid")}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted")
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
    got: list[bytes] = []
    with Consumer({**common, "auto.offset.reset": "earliest",
                   "isolation.level": "read_committed"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got.extend(m.value or b"" for m in consumer.poll(0.5))
    assert got == [b"committed"]


def test_oncelog_client_refuses_a_broker_it_does_not_trust(
    broker_factory: BrokerFactory, tls_material: TlsMaterial
) -> None:
    _, bootstrap = ssl_broker(broker_factory, tls_material)
    config = {"bootstrap.servers": bootstrap, "security.protocol": "SSL",
              "ssl.truststore.location": str(tls_material.rogue_ca),
              "default.api.timeout.ms": 3000, "request.timeout.ms": 3000}
    with Admin(config) as admin:
        try:
            admin.list_topics()
        except Exception as exc:
            assert "certificate verify failed" in str(exc) or "TLS" in str(exc), exc
        else:
            raise AssertionError("listed topics through a broker it does not trust")


def serve_exit(tmp_path: Path, *configs: str) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "oncelog.cli.main", "serve", "--data-dir",
            str(tmp_path / "data")]
    for pair in configs:
        argv += ["-c", pair]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_bad_listener_configs_are_startup_errors_naming_the_key(
    tmp_path: Path, tls_material: TlsMaterial
) -> None:
    port = free_port(LOOPBACK)
    cases = {
        "ssl.keystore.location": [f"listeners=SSL://{LOOPBACK}:{port}"],
        "ssl.keystore.type": [f"listeners=SSL://{LOOPBACK}:{port}",
                              f"ssl.keystore.location={tls_material.broker}"],
        "listener.name.ssl.ssl.truststore.location": [
            f"listeners=SSL://{LOOPBACK}:{port}", "ssl.keystore.type=PEM",
            f"ssl.keystore.location={tls_material.broker}", "ssl.truststore.type=PEM",
            f"listener.name.ssl.ssl.truststore.location={tmp_path / 'missing.pem'}"],
        "security.inter.broker.protocol should be set": [
            "inter.broker.listener.name=PLAINTEXT", "security.inter.broker.protocol=SSL"],
        "inter.broker.listener.name must be a listener name": [
            "security.inter.broker.protocol=SSL", f"listeners=PLAINTEXT://{LOOPBACK}:{port}"],
        "sasl.enabled.mechanisms: GSSAPI": [f"listeners=SASL_PLAINTEXT://{LOOPBACK}:{port}",
                                            "sasl.enabled.mechanisms=GSSAPI,PLAIN"],
    }
    for expected, configs in cases.items():
        if expected != "inter.broker.listener.name must be a listener name":
            configs = [*configs, f"inter.broker.listener.name={configs[0][10:].split(':')[0]}"]
        if "should be set" in expected:
            configs = configs[:2]
        done = serve_exit(tmp_path, *configs)
        assert done.returncode == 2, (expected, done.stderr)
        assert expected in done.stderr, (expected, done.stderr)
        assert "Traceback" not in done.stderr
