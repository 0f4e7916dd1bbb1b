"""SASL on a SASL_PLAINTEXT listener of a real ``oncelog serve``: confluent-kafka and
oncelog.client with PLAIN and SCRAM-SHA-256/512 (SCRAM users created with
AlterUserScramCredentials by a PLAIN admin), refusals with Kafka's error codes, the
unauthenticated connection's limits, and KIP-368 session expiry / re-authentication."""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from java_txn import need_reference

from oncelog.client import Admin
from oncelog.client import Consumer as OncelogConsumer
from oncelog.client import Producer as OncelogProducer
from oncelog.client.admin import ScramDeletion, ScramUpsertion
from oncelog.client.errors import AuthenticationError, KafkaClientError
from oncelog.client.types import ConfigResource
from oncelog.errors import ErrorCode
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import LOOPBACK, free_port
from tests.conftest import BrokerFactory
from tests.support.cli import ok, oncelog_cli
from tests.support.kafka import run_kafka_tool
from tests.support.names import unique_name, unique_topic
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration

@dataclass(frozen=True)
class SaslBroker:
    """A broker with a SASL_PLAINTEXT listener beside the harness's PLAINTEXT one."""

    process: BrokerProcess
    host: str
    port: int

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.process.log_path


def start_sasl_broker(broker_factory: BrokerFactory, **configs: Any) -> SaslBroker:
    port = free_port(LOOPBACK)
    process = broker_factory(configs={**SASL_CONFIGS,
                                      "listeners": f"SASL_PLAINTEXT://{LOOPBACK}:{port}",
                                      **configs})
    return SaslBroker(process, LOOPBACK, port)


JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-secret" user_alice="alice-secret";')
SASL_CONFIGS: dict[str, Any] = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
}
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
              "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
SASL_AUTHENTICATION_FAILED = 58
UNSUPPORTED_SASL_MECHANISM = 33


def sasl_conf(broker: SaslBroker, mechanism: str, user: str, password: str,
              **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
            **extra}


def broker_output(broker: SaslBroker) -> str:
    """What the broker logged (without the harness's command lines, which hold the JAAS
    line the test passed with -c)."""
    return "".join(line for line in broker.log_path.read_text().splitlines(keepends=True)
                   if not line.startswith("===== start"))


def add_scram_user(broker: SaslBroker, mechanism: str, user: str, password: str) -> None:
    admin = AdminClient(sasl_conf(broker, "PLAIN", "admin", "admin-secret"))
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(MECHANISMS[mechanism],
                                                                    4096), password.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)


@pytest.fixture
def sasl_broker(broker_factory: BrokerFactory) -> SaslBroker:
    return start_sasl_broker(broker_factory)


def confluent_transaction(broker: SaslBroker, conf: dict[str, Any]) -> list[bytes]:
    """A transaction committed by confluent-kafka with ``conf``; what a read_committed
    consumer with the same login reads back."""
    topic = unique_topic("sasl")
    producer = Producer({**conf, "transactional.id": unique_name("sasl-txn")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, f"v{i}".encode())
    producer.commit_transaction(30)
    consumer = Consumer({**conf, "group.id": unique_name("sasl-g"),
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 3 and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            values.append(message.value() or b"")
    consumer.close()
    return values


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_kafka_transaction_over_sasl(sasl_broker: SaslBroker,
                                               mechanism: str) -> None:
    user, password = "alice", "alice-secret"
    if mechanism != "PLAIN":
        user, password = unique_name("scram"), "pencil-" + mechanism
        add_scram_user(sasl_broker, mechanism, user, password)
    values = confluent_transaction(sasl_broker, sasl_conf(sasl_broker, mechanism, user,
                                                          password))
    assert values == [b"v0", b"v1", b"v2"]
    log = broker_output(sasl_broker)
    assert f"authenticated as User:{user} ({mechanism})" in log
    assert password not in log


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_oncelog_client_transaction_over_sasl(sasl_broker: SaslBroker,
                                              mechanism: str) -> None:
    user, password = "alice", "alice-secret"
    if mechanism != "PLAIN":
        user, password = unique_name("scram"), "crayon"
        add_scram_user(sasl_broker, mechanism, user, password)
    conf = sasl_conf(sasl_broker, mechanism, user, password)
    topic = unique_topic("sasl")
    with OncelogProducer({**conf, "transactional.id": unique_name("sasl-txn")}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, value=f"v{i}".encode())
        producer.commit_transaction()
    with OncelogConsumer({**conf, "group.id": unique_name("g"),
                          "auto.offset.reset": "earliest"}) as consumer:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 3 and time.monotonic() < deadline:
            values += [r.value for r in consumer.poll(1.0) if r.value is not None]
    assert values == [b"v0", b"v1", b"v2"]


def _confluent_error(conf: dict[str, Any]) -> str:
    """The error confluent-kafka reports when a Metadata request cannot get through."""
    errors: list[str] = []
    client = Producer({**conf, "error_cb": lambda err: errors.append(str(err)),
                       "log_level": 0})
    with pytest.raises(KafkaException):
        client.list_topics(timeout=3)
    client.poll(1)  # serves error_cb
    return " | ".join(errors)


@pytest.mark.parametrize(("mechanism", "user", "password"), [
    ("PLAIN", "alice", "wrong"), ("PLAIN", "nobody", "alice-secret"),
    ("SCRAM-SHA-256", "alice", "wrong"), ("SCRAM-SHA-256", "nobody", "x"),
])
def test_wrong_password_and_unknown_user_are_refused(sasl_broker: SaslBroker,
                                                     mechanism: str, user: str,
                                                     password: str) -> None:
    if mechanism != "PLAIN":
        add_scram_user(sasl_broker, mechanism, "alice", "alice-secret")
    message = _confluent_error(sasl_conf(sasl_broker, mechanism, user, password))
    assert "Authentication failed" in message, message
    with pytest.raises(AuthenticationError) as info:
        Admin(sasl_conf(sasl_broker, mechanism, user, password)).list_topics()
    assert info.value.code is not None and int(info.value.code) == SASL_AUTHENTICATION_FAILED
    assert password not in str(info.value)


# -- raw protocol: the unauthenticated connection -------------------------------------

def _frame(api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    client = b"raw"
    head = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    if api_key == 36 and version >= 2:  # flexible: header tagged fields
        head += b"\0"
    return struct.pack(">i", len(head) + len(body)) + head + body


def _handshake(mechanism: str) -> bytes:
    return _frame(17, 1, 1, struct.pack(">h", len(mechanism)) + mechanism.encode())


def _read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by broker")
        data += chunk
    return data


def _closed_without_answer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _connect(broker: SaslBroker) -> socket.socket:
    sock = socket.create_connection((broker.host, broker.port), timeout=15)
    return sock


def test_unknown_mechanism_answers_the_enabled_list_then_closes(
        sasl_broker: SaslBroker) -> None:
    with _connect(sasl_broker) as sock:
        sock.sendall(_handshake("GSSAPI"))
        body = _read_frame(sock)[4:]  # after the correlation id
        (code,) = struct.unpack_from(">h", body)
        assert code == UNSUPPORTED_SASL_MECHANISM
        assert b"PLAIN" in body and b"SCRAM-SHA-256" in body and b"SCRAM-SHA-512" in body
        assert _closed_without_answer(sock)


def test_listener_override_of_enabled_mechanisms(broker_factory: BrokerFactory) -> None:
    """``listener.name.<listener>.sasl.enabled.mechanisms`` narrows one listener's list."""
    broker = start_sasl_broker(
        broker_factory, **{"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN"})
    with _connect(broker) as sock:
        sock.sendall(_handshake("SCRAM-SHA-256"))
        body = _read_frame(sock)[4:]
        assert struct.unpack_from(">h", body)[0] == UNSUPPORTED_SASL_MECHANISM
        assert b"PLAIN" in body and b"SCRAM" not in body
    client = Producer(sasl_conf(broker, "PLAIN", "alice", "alice-secret"))
    assert client.list_topics(timeout=30).brokers


def test_failed_authentication_is_answered_and_closed_after_the_delay(
        broker_factory: BrokerFactory) -> None:
    """connection.failed.authentication.delay.ms: the SASL_AUTHENTICATION_FAILED answer and
    the close come no sooner than the delay (a lower bound only: load makes it later)."""
    broker = start_sasl_broker(broker_factory,
                               **{"connection.failed.authentication.delay.ms": 1500})
    with _connect(broker) as sock:
        sock.sendall(_handshake("PLAIN"))
        _read_frame(sock)
        token = b"\0alice\0wrong"
        started = time.monotonic()
        sock.sendall(_frame(36, 1, 2, struct.pack(">i", len(token)) + token))
        body = _read_frame(sock)[4:]
        waited = time.monotonic() - started
        assert struct.unpack_from(">h", body)[0] == SASL_AUTHENTICATION_FAILED
        assert _closed_without_answer(sock)
    assert waited >= 1.5, waited


def test_metadata_before_authentication_gets_only_the_close(
        sasl_broker: SaslBroker) -> None:
    metadata_v1 = _frame(3, 1, 7, struct.pack(">i", -1))
    with _connect(sasl_broker) as sock:
        sock.sendall(metadata_v1)
        assert _closed_without_answer(sock)
    with _connect(sasl_broker) as sock:  # also after a handshake, before authenticating
        sock.sendall(_handshake("PLAIN"))
        _read_frame(sock)
        sock.sendall(metadata_v1)
        answer = _read_frame(sock)  # Metadata's error response (it has no error field)
        assert struct.unpack_from(">i", answer)[0] == 7
        assert _closed_without_answer(sock)


def test_silent_unauthenticated_connection_is_closed_in_bounded_time(
        broker_factory: BrokerFactory) -> None:
    broker = start_sasl_broker(broker_factory, **{"connections.max.idle.ms": 1500})
    with _connect(broker) as sock:
        started = time.monotonic()
        sock.sendall(_handshake("PLAIN"))  # then nothing more
        _read_frame(sock)
        assert _closed_without_answer(sock)
        assert time.monotonic() - started < 10
    with _connect(broker) as sock:  # a frame dribbled byte by byte counts too
        started = time.monotonic()
        frame = struct.pack(">i", 200) + bytes(200)  # a 200-byte frame, dribbled
        closed = False
        for byte in frame:
            try:
                sock.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            time.sleep(0.1)  # the attacker's pace, not synchronisation
        assert closed or _closed_without_answer(sock)
        assert time.monotonic() - started < 8


def test_reauthentication_and_expired_sessions(broker_factory: BrokerFactory) -> None:
    broker = start_sasl_broker(broker_factory, **{"connections.max.reauth.ms": 2000})
    conf = sasl_conf(broker, "PLAIN", "alice", "alice-secret")
    topic = unique_topic("reauth")
    # librdkafka re-authenticates (KIP-368) on the same connection and keeps producing.
    producer = Producer(conf)
    deadline = time.monotonic() + 7
    delivered: list[Any] = []
    while time.monotonic() < deadline:
        producer.produce(topic, b"x", on_delivery=lambda err, msg: delivered.append(err))
        producer.flush(10)
        time.sleep(0.25)  # a steady trickle of requests across several session lifetimes
    assert delivered and all(err is None for err in delivered)
    log = broker_output(broker)
    # on the same connections (KIP-368), not by reconnecting
    assert log.count("re-authenticated as User:alice (PLAIN), session lifetime 2000 ms") >= 2
    assert "SASL session expired" not in log
    # A raw client that does not re-authenticate is closed at its first request after expiry.
    with _connect(broker) as sock:
        sock.sendall(_handshake("PLAIN"))
        _read_frame(sock)
        token = b"\0alice\0alice-secret"
        sock.sendall(_frame(36, 1, 2, struct.pack(">i", len(token)) + token))
        body = _read_frame(sock)[4:]
        assert struct.unpack_from(">h", body)[0] == 0
        assert body.endswith(struct.pack(">q", 2000))  # session_lifetime_ms
        api_versions = _frame(18, 0, 3, b"")
        sock.sendall(api_versions)
        _read_frame(sock)
        time.sleep(2.2)  # let the session's lifetime pass
        sock.sendall(api_versions)
        assert _closed_without_answer(sock)


def test_oncelog_client_reauthenticates(broker_factory: BrokerFactory) -> None:
    broker = start_sasl_broker(broker_factory, **{"connections.max.reauth.ms": 1500})
    conf = sasl_conf(broker, "PLAIN", "alice", "alice-secret")
    with Admin(conf) as admin:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            admin.list_topics()
            time.sleep(0.3)  # requests spread over several session lifetimes
    log = broker_output(broker)
    assert log.count("re-authenticated as User:alice (PLAIN), session lifetime 1500 ms") >= 2
    assert "SASL session expired" not in log


def test_sasl_secrets_stay_out_of_describe_configs_and_logs(
        sasl_broker: SaslBroker) -> None:
    with Admin(sasl_conf(sasl_broker, "PLAIN", "admin", "admin-secret")) as admin:
        configs = admin.describe_configs([ConfigResource.broker(1)], include_synonyms=True)
    entries = next(iter(configs.values()))
    # The per-listener settings are listed, as Kafka lists them; the JAAS line as a secret.
    jaas = entries["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert jaas.value is None and jaas.is_sensitive
    assert "alice-secret" not in repr(configs)
    assert "alice-secret" not in broker_output(sasl_broker)


# -- SCRAM users: the CLI and the APIs' errors -----------------------------------------

def test_users_add_list_remove_then_login_works_and_stops(sasl_broker: SaslBroker,
                                                          tmp_path: Path) -> None:
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config="
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret";\n')
    connection = ("--bootstrap-server", sasl_broker.bootstrap,
                  "--command-config", str(command_config))
    password_file = tmp_path / "pw"
    password_file.write_text("bob-secret\n")
    out = ok(oncelog_cli("users", "add", "bob", "--mechanism", "SCRAM-SHA-512",
                         "--iterations", "8192", "--password-file", str(password_file),
                         *connection))
    assert "bob-secret" not in out
    ok(oncelog_cli("users", "add", "bob", *connection, stdin="bob-256\n"))
    listing = ok(oncelog_cli("users", "list", *connection)).split("\n")
    assert listing[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
    assert ["bob", "SCRAM-SHA-256", "4096"] in [line.split() for line in listing]
    assert ["bob", "SCRAM-SHA-512", "8192"] in [line.split() for line in listing]
    for mechanism, password in (("SCRAM-SHA-512", "bob-secret"), ("SCRAM-SHA-256", "bob-256")):
        with Admin(sasl_conf(sasl_broker, mechanism, "bob", password)) as admin:
            admin.list_topics()
    ok(oncelog_cli("users", "remove", "bob", *connection))
    assert "bob" not in ok(oncelog_cli("users", "list", *connection))
    with pytest.raises(AuthenticationError):
        Admin(sasl_conf(sasl_broker, "SCRAM-SHA-512", "bob", "bob-secret")).list_topics()
    missing = oncelog_cli("users", "remove", "bob", *connection)
    assert missing.returncode == 1 and "RESOURCE_NOT_FOUND" in missing.stderr
    refused = oncelog_cli("users", "list", "--bootstrap-server", sasl_broker.bootstrap)
    assert refused.returncode == 1  # no login: the broker closes the connection


def test_alter_and_describe_scram_credentials_errors(sasl_broker: SaslBroker) -> None:
    with Admin(sasl_conf(sasl_broker, "PLAIN", "admin", "admin-secret")) as admin:
        results = admin.alter_user_scram_credentials([
            ScramUpsertion("weak", "SCRAM-SHA-256", "pw", iterations=1000),
            ScramUpsertion("strong", "SCRAM-SHA-256", "pw", iterations=16385),
            ScramUpsertion("sha1", "SCRAM-SHA-1", "pw"),
            ScramUpsertion("", "SCRAM-SHA-256", "pw"),
            ScramDeletion("ghost", "SCRAM-SHA-256"),
            ScramUpsertion("twice", "SCRAM-SHA-256", "pw"),
            ScramUpsertion("twice", "SCRAM-SHA-512", "pw"),
            ScramUpsertion("fine", "SCRAM-SHA-256", "pw"),
        ])
        codes = {user: None if error is None else error.code for user, error in results.items()}
        assert codes == {
            "weak": ErrorCode.unacceptable_credential,
            "strong": ErrorCode.unacceptable_credential,
            "sha1": ErrorCode.unsupported_sasl_mechanism,
            "": ErrorCode.unacceptable_credential,
            "ghost": ErrorCode.resource_not_found,
            "twice": ErrorCode.duplicate_resource,
            "fine": None,
        }
        described = admin.describe_user_scram_credentials(["fine", "ghost"])
        assert described["fine"] == {"SCRAM-SHA-256": 4096}
        ghost = described["ghost"]
        assert isinstance(ghost, KafkaClientError)
        assert ghost.code == ErrorCode.resource_not_found
        assert set(admin.describe_user_scram_credentials()) == {"fine"}
    # the request ran as the authenticated principal (RequestContext.session)
    assert "SCRAM credentials altered by User:admin" in broker_output(sasl_broker)


def test_sasl_ssl_scram_transaction(broker_factory: BrokerFactory,
                                    tls_material: TlsMaterial) -> None:
    """SASL_SSL: TLS first, then SCRAM-SHA-512 inside it; the principal is the SASL user."""
    port = free_port(LOOPBACK)
    process = broker_factory(configs={
        **SASL_CONFIGS, **tls_material.broker_configs(),
        "listeners": f"SASL_SSL://{LOOPBACK}:{port}",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS})
    broker = SaslBroker(process, LOOPBACK, port)
    admin = AdminClient({**sasl_conf(broker, "PLAIN", "admin", "admin-secret"),
                         "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(tls_material.ca)})
    upsert = UserScramCredentialUpsertion("carol", ScramCredentialInfo(
        ScramMechanism.SCRAM_SHA_512, 4096), b"carol-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)
    conf = {**sasl_conf(broker, "SCRAM-SHA-512", "carol", "carol-secret"),
            "security.protocol": "SASL_SSL"}
    values = confluent_transaction(broker, {**conf, "ssl.ca.location": str(tls_material.ca)})
    assert values == [b"v0", b"v1", b"v2"]
    with Admin({**conf, "ssl.truststore.location": str(tls_material.ca)}) as oncelog_admin:
        assert oncelog_admin.list_topics()
    log = broker_output(broker)
    assert "on SASL_SSL authenticated as User:carol (SCRAM-SHA-512)" in log


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
def test_java_client_produces_and_reauthenticates(broker_factory: BrokerFactory,
                                                  tmp_path: Path, mechanism: str) -> None:
    """kafka-clients (VerifiableProducer, idempotent) logs in with sasl.jaas.config and
    re-authenticates on its connections when the session lifetime is 1.5 s. The producer
    paces 50 sends at 5/s from its start, so a first send delayed by a slow login catches
    up in a burst: 10 s leaves room for two re-authentications even when the first send
    waited 7 s (25 sends left one on a loaded CI machine)."""
    need_reference()
    broker = start_sasl_broker(broker_factory, **{"connections.max.reauth.ms": 1500})
    user, password, module = "alice", "alice-secret", "plain.PlainLoginModule"
    if mechanism != "PLAIN":
        user, password, module = "dave", "dave-secret", "scram.ScramLoginModule"
        add_scram_user(broker, mechanism, user, password)
    config = tmp_path / "producer.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={mechanism}\n"
        f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
        f'username="{user}" password="{password}";\n'
        "enable.idempotence=true\nacks=all\nretries=2147483647\n")
    topic = unique_topic("java-sasl")
    done = run_kafka_tool("VerifiableProducer", "--bootstrap-server", broker.bootstrap,
                          "--topic", topic, "--max-messages", "50", "--throughput", "5",
                          "--producer.config", str(config), timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    sent = [line for line in done.stdout.splitlines() if "producer_send_success" in line]
    assert len(sent) == 50, done.stdout[-3000:]
    log = broker_output(broker)
    again = log.count(f"re-authenticated as User:{user} ({mechanism}), session lifetime 1500 ms")
    assert again >= 2, log[-3000:]
    assert "SASL session expired" not in log
