"""``--command-config`` for the confluent-kafka verify worker: the Java client's names, as
the file is written for Kafka's tools, translated to librdkafka's."""

from __future__ import annotations

from pathlib import Path

from oncelog.verify.clients import command_configs
from oncelog.verify.clients.confluent import librdkafka_configs

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="a;b=c";')


def test_java_names_become_librdkafka_names() -> None:
    assert librdkafka_configs({
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": JAAS, "ssl.truststore.type": "PEM",
        "ssl.truststore.location": "/ca.pem", "ssl.keystore.type": "PEM",
        "ssl.keystore.location": "/me.pem", "ssl.key.password": "k",
        "ssl.endpoint.identification.algorithm": "",
    }) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice", "sasl.password": "a;b=c", "ssl.ca.location": "/ca.pem",
        "ssl.certificate.location": "/me.pem", "ssl.key.location": "/me.pem",
        "ssl.key.password": "k", "ssl.endpoint.identification.algorithm": "none",
    }


def test_command_configs_reads_a_properties_file(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text(f"# a comment\nsecurity.protocol=SSL\nsasl.jaas.config={JAAS}\n")
    assert command_configs(path) == {"security.protocol": "SSL", "sasl.jaas.config": JAAS}
    assert command_configs(None) == {}
