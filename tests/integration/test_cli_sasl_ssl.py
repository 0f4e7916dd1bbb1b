"""The ``oncelog`` command against a broker whose only client listener is SASL_SSL: every
command logs in with ``--command-config FILE`` (security.protocol=SASL_SSL, sasl.mechanism,
the Java client's sasl.jaas.config, ssl.truststore.location), as Kafka's tools do; a wrong
password is a one-line error and a non-zero exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from oncelog.harness.net import LOOPBACK, free_port
from tests.conftest import BrokerFactory
from tests.support.cli import ok, oncelog_cli
from tests.support.names import unique_name, unique_topic
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')


def command_config(path: Path, tls: TlsMaterial, password: str) -> Path:
    path.write_text(
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="dana" password="{password}";\n'
        f"ssl.truststore.location={tls.ca}\n"
        "ssl.truststore.type=PEM\n")
    return path


def test_cli_commands_over_sasl_ssl(broker_factory: BrokerFactory, tls_material: TlsMaterial,
                                    tmp_path: Path) -> None:
    port = free_port(LOOPBACK)
    broker_factory(configs={
        **tls_material.broker_configs(),
        "listeners": f"SASL_SSL://{LOOPBACK}:{port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS})
    bootstrap = f"{LOOPBACK}:{port}"
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(tls_material.ca), "sasl.mechanism": "PLAIN",
                         "sasl.username": "admin", "sasl.password": "admin-secret"})
    upsert = UserScramCredentialUpsertion("dana", ScramCredentialInfo(
        ScramMechanism.SCRAM_SHA_512, 4096), b"dana-secret")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(timeout=30)

    config = command_config(tmp_path / "client.properties", tls_material, "dana-secret")
    connection = ("--bootstrap-server", bootstrap, "--command-config", str(config))
    topic = unique_topic("cli-sasl-ssl")
    txn_id = unique_name("cli-sasl-ssl-txn")
    ok(oncelog_cli("topics", "create", topic, "--partitions", "2", *connection))
    assert topic in ok(oncelog_cli("topics", "list", *connection)).split()
    ok(oncelog_cli("produce", "--topic", topic, "--transactional-id", txn_id, *connection,
                   stdin="one\ntwo\nthree\n"))
    consumed = ok(oncelog_cli("consume", "--topic", topic, "--from-beginning",
                              "--max-messages", "3", "--timeout-ms", "20000", *connection))
    assert sorted(consumed.split()) == ["one", "three", "two"]
    assert txn_id in ok(oncelog_cli("txn", "list", *connection))
    users = [line.split() for line in ok(oncelog_cli("users", "list", *connection)).splitlines()]
    assert ["dana", "SCRAM-SHA-512", "4096"] in users

    wrong = command_config(tmp_path / "wrong.properties", tls_material, "not-dana's")
    refused = oncelog_cli("topics", "list", "--bootstrap-server", bootstrap,
                          "--command-config", str(wrong))
    assert refused.returncode != 0
    assert "SASL_AUTHENTICATION_FAILED" in refused.stderr, refused.stderr
    assert "not-dana's" not in refused.stderr + refused.stdout
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
