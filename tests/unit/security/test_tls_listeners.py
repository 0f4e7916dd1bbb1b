"""Sans-IO parts of listeners and TLS: Kafka's listener validation and the RFC 2253 form
of a certificate subject (the principal of a client certificate)."""

from __future__ import annotations

import pytest

from oncelog.broker.listeners import plan_listeners
from oncelog.config import BrokerConfig, ConfigError
from oncelog.security.tls import principal_from_certificate, rfc2253


def test_rfc2253_reverses_rdns_and_escapes() -> None:
    subject = ((("countryName", "US"),), (("organizationName", "Acme, Inc."),),
               (("commonName", "alice"), ("userId", "a1")))
    assert rfc2253(subject) == "CN=alice+UID=a1,O=Acme\\, Inc.,C=US"
    assert str(principal_from_certificate({"subject": subject})) == (
        "User:CN=alice+UID=a1,O=Acme\\, Inc.,C=US")
    assert str(principal_from_certificate({})) == "User:ANONYMOUS"


def test_listen_flag_is_the_plaintext_listener_beside_configured_ones() -> None:
    config = BrokerConfig({"listeners": "PLAINTEXT://:9092,EXTERNAL://127.0.0.1:9093",
                           "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
                           "EXTERNAL:PLAINTEXT"})
    plan = plan_listeners(config, ("127.0.0.1", 0), ("broker.example", 19092))
    assert [str(x.endpoint) for x in plan.listeners] == [
        "PLAINTEXT://127.0.0.1:0", "EXTERNAL://127.0.0.1:9093"]
    assert [str(e) for e in plan.advertised] == [
        "PLAINTEXT://broker.example:19092", "EXTERNAL://127.0.0.1:9093"]
    assert plan.inter_broker == "PLAINTEXT"


@pytest.mark.parametrize(("configs", "message"), [
    ({"listeners": "PLAINTEXT://:1,PLAINTEXT://:2"}, "Each listener must have a different name"),
    ({"listeners": "PLAINTEXT://:1,SSL://:1"}, "Each listener must have a different port"),
    ({"listeners": "FOO://:1"}, "no security protocol defined for listener FOO"),
    ({"advertised.listeners": "SSL://h:1"}, "must be equal to or a subset"),
    ({"advertised.listeners": "PLAINTEXT://0.0.0.0:1"}, "nonroutable meta-address"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol"),
    ({"inter.broker.listener.name": "NOPE"}, "not found in listener.security.protocol.map"),
    ({"security.inter.broker.protocol": "SSL"}, "must be a listener name defined in"),
    ({"listener.security.protocol.map": "X:NOPE"}, "listener.security.protocol.map"),
])
def test_kafka_listener_validation(configs: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_listeners(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:9092", **configs}))
