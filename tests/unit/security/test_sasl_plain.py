"""SASL/PLAIN messages and JAAS lines, and the connection's SASL state table."""

from __future__ import annotations

import pytest

from oncelog.security.sasl import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    AuthenticationFailed,
    IllegalSaslState,
    SaslSession,
    State,
    UnsupportedMechanism,
)
from oncelog.security.sasl_plain import (
    PlainServer,
    parse_jaas_config,
    parse_plain,
    plain_message,
    plain_users_verifier,
)

METADATA = 3


def _plain() -> PlainServer:
    return PlainServer(plain_users_verifier({"alice": "alice-secret"}))


def test_plain_accepts_a_user_with_or_without_the_same_authzid() -> None:
    for token in (plain_message("alice", "alice-secret"),
                  plain_message("alice", "alice-secret", authzid="alice")):
        server = _plain()
        assert server.evaluate(token) == b""
        assert server.complete and server.username == "alice"


@pytest.mark.parametrize(("token", "message"), [
    (plain_message("alice", "wrong"), "Invalid username or password"),
    (plain_message("bob", "alice-secret"), "Invalid username or password"),
    (plain_message("", "x"), "username not specified"),
    (plain_message("alice", ""), "password not specified"),
    (plain_message("alice", "alice-secret", authzid="admin"), "authorization id"),
    (b"alice\0alice-secret", "expected 3 tokens, got 2"),
    (b"\0a\0b\0c", "expected 3 tokens, got 4"),
    (b"\xff\0a\0b", "not UTF-8"),
])
def test_plain_refusals(token: bytes, message: str) -> None:
    server = _plain()
    with pytest.raises(AuthenticationFailed, match=message) as info:
        server.evaluate(token)
    assert "alice-secret" not in info.value.message
    assert not server.complete


def test_plain_takes_one_message() -> None:
    server = _plain()
    server.evaluate(plain_message("alice", "alice-secret"))
    with pytest.raises(IllegalSaslState):
        server.evaluate(plain_message("alice", "alice-secret"))


def test_parse_plain() -> None:
    assert parse_plain(b"z\0u\0p") == ("z", "u", "p")


def test_jaas_plain_users_as_kafka_reads_them() -> None:
    jaas = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required '
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="a \\"quoted\\" pw;x" user_bob=bare;')
    assert jaas.login_module == "org.apache.kafka.common.security.plain.PlainLoginModule"
    assert jaas.options["username"] == "admin"
    assert jaas.plain_users == {"admin": "admin-secret", "alice": 'a "quoted" pw;x',
                                "bob": "bare"}
    assert "secret" not in repr(jaas)


@pytest.mark.parametrize("bad", ["", "Module", "Module required user_a", "M required x=\"y"])
def test_jaas_refuses_malformed_lines_without_echoing_values(bad: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_jaas_config(bad)
    assert "\"y" not in str(info.value)


def test_session_allows_only_api_versions_and_handshake_before_authentication() -> None:
    session = SaslSession(("PLAIN",))
    session.on_request(API_VERSIONS)
    with pytest.raises(IllegalSaslState):
        session.on_request(API_VERSIONS)  # once only
    assert session.state is State.FAILED
    session = SaslSession(("PLAIN",))
    with pytest.raises(IllegalSaslState, match="during SASL handshake"):
        session.on_request(METADATA)
    session = SaslSession(("PLAIN",))
    with pytest.raises(IllegalSaslState):
        session.on_request(SASL_AUTHENTICATE)


def test_session_authenticate_state_refuses_other_requests() -> None:
    session = SaslSession(("PLAIN",))
    session.on_request(SASL_HANDSHAKE)
    session.on_handshake("PLAIN", 1)
    session.on_request(SASL_AUTHENTICATE)
    with pytest.raises(IllegalSaslState, match="during SASL authentication"):
        session.on_request(METADATA)


def test_session_unsupported_mechanism_names_the_enabled_ones() -> None:
    session = SaslSession(("PLAIN", "SCRAM-SHA-256"))
    session.on_request(SASL_HANDSHAKE)
    with pytest.raises(UnsupportedMechanism) as info:
        session.on_handshake("GSSAPI", 1)
    assert info.value.enabled == ("PLAIN", "SCRAM-SHA-256")
    assert session.state is State.FAILED


def test_session_expiry_and_reauthentication_keep_the_principal() -> None:
    session = SaslSession(("PLAIN", "SCRAM-SHA-256"), max_reauth_ms=1000)
    session.on_request(SASL_HANDSHAKE)
    session.on_handshake("PLAIN", 1)
    assert session.on_mechanism_complete("alice", now_ms=5000) == 1000
    session.on_request(METADATA)
    assert not session.expired(5999) and session.expired(6000)
    session.on_request(SASL_HANDSHAKE)
    with pytest.raises(AuthenticationFailed, match="re-authentication of mechanism 'PLAIN'"):
        session.on_handshake("SCRAM-SHA-256", 1)
    session = SaslSession(("PLAIN",), max_reauth_ms=1000)
    session.on_handshake("PLAIN", 1)
    session.on_mechanism_complete("alice", now_ms=0)
    session.on_request(SASL_HANDSHAKE)
    session.on_handshake("PLAIN", 1)
    assert session.reauthenticating
    assert session.on_mechanism_complete("alice", now_ms=900) == 1000
    assert session.expires_at_ms == 1900
    session.on_request(SASL_HANDSHAKE)
    session.on_handshake("PLAIN", 1)
    with pytest.raises(AuthenticationFailed, match="Cannot change principals"):
        session.on_mechanism_complete("mallory", now_ms=1000)


def test_session_without_reauth_never_expires() -> None:
    session = SaslSession(("PLAIN",))
    session.on_handshake("PLAIN", 1)
    assert session.on_mechanism_complete("alice", now_ms=0) == 0
    assert not session.expired(10**12)
