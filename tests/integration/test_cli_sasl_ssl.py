"""The ``oncelog`` command against a broker whose only client listener is SASL_SSL: every
command logs in with ``--command-config FILE`` (security.protocol=SASL_SSL, sasl.mechanism,
the Java client's sasl.jaas.config, ssl.truststore.location), as Kafka's tools do; a wrong
password is a one-line error and a non-zero exit code, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import BrokerFactory
from tests.support.cli import ok, oncelog_cli
from tests.support.names import unique_name, unique_topic
from tests.support.sasl_ssl import start_sasl_ssl_broker
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration


def test_cli_commands_over_sasl_ssl(broker_factory: BrokerFactory, tls_material: TlsMaterial,
                                    tmp_path: Path) -> None:
    broker = start_sasl_ssl_broker(broker_factory, tls_material)
    broker.add_scram_user("dana", "dana-secret")
    config = tmp_path / "client.properties"
    config.write_text(broker.properties("dana", "dana-secret"))
    connection = ("--bootstrap-server", broker.bootstrap, "--command-config", str(config))
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

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(broker.properties("dana", "not-dana's"))
    refused = oncelog_cli("topics", "list", "--bootstrap-server", broker.bootstrap,
                          "--command-config", str(wrong))
    assert refused.returncode != 0
    assert "SASL_AUTHENTICATION_FAILED" in refused.stderr, refused.stderr
    assert "not-dana's" not in refused.stderr + refused.stdout
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
