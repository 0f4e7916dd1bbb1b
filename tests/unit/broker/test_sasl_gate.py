"""The broker's per-connection SASL gate (oncelog.broker.sasl.SaslConnection) fed frames
directly, with a fake clock: v1 and v0 (raw token) exchanges, ILLEGAL_SASL_STATE, the
UNSUPPORTED_SASL_MECHANISM answer, session expiry and re-authentication."""

from __future__ import annotations

import asyncio
from typing import Any

from oncelog.broker import api as handlers
from oncelog.broker.sasl import Reply, SaslConnection
from oncelog.client.wire import decode_response, encode_request, request
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from oncelog.security.credentials import SHA_256, MemoryCredentials, ScramCredential
from oncelog.security.sasl_plain import plain_message
from oncelog.security.scram import ScramClient

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')


METADATA = request(api.METADATA, 12, topics=None, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False)


class Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def gate(clock: Clock, **configs: str) -> SaslConnection:
    config = BrokerConfig({
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.idle.ms": "10000", **configs})
    credentials = MemoryCredentials({"bob": {"SCRAM-SHA-256": ScramCredential.from_password(
        SHA_256, "bob-secret", b"salt", 4096)}})
    return SaslConnection(config, credentials, "SASL_PLAINTEXT", "SASL_PLAINTEXT",
                          "127.0.0.1", clock_ms=clock)


def send(conn: SaslConnection, body: Any) -> Reply | None:
    return asyncio.run(conn.on_frame(encode_request(7, "test", body)[4:]))


def answer(reply: Reply | None, api_key: int, version: int) -> Any:
    assert reply is not None and reply.frame is not None
    return decode_response(api_key, version, reply.frame[4:])


def handshake(conn: SaslConnection, mechanism: str, version: int = 1) -> Any:
    reply = send(conn, request(api.SASL_HANDSHAKE, version, mechanism=mechanism))
    return reply, answer(reply, api.SASL_HANDSHAKE, version)


def authenticate(conn: SaslConnection, token: bytes, version: int = 2) -> tuple[Reply, Any]:
    reply = send(conn, request(api.SASL_AUTHENTICATE, version, auth_bytes=token))
    assert reply is not None
    return reply, answer(reply, api.SASL_AUTHENTICATE, version)


def test_plain_then_requests_pass_through_as_the_user() -> None:
    conn = gate(Clock())
    assert send(conn, request(api.API_VERSIONS, 3, client_software_name="t",
                              client_software_version="1")) is None  # the broker answers
    reply, body = handshake(conn, "PLAIN")
    assert not reply.close and body.error_code == ErrorCode.none
    assert list(body.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    reply, body = authenticate(conn, plain_message("alice", "alice-secret"))
    assert not reply.close and body.error_code == ErrorCode.none
    assert send(conn, METADATA) is None
    assert str(conn.session().principal) == "User:alice"


def test_scram_v0_handshake_uses_raw_tokens() -> None:
    conn = gate(Clock())
    _, body = handshake(conn, "SCRAM-SHA-256", version=0)
    assert body.error_code == ErrorCode.none
    client = ScramClient(SHA_256, "bob", "bob-secret")
    first = asyncio.run(conn.on_frame(client.first()))
    assert first is not None and first.frame is not None and not first.close
    final = asyncio.run(conn.on_frame(client.evaluate(first.frame[4:])))
    assert final is not None and final.frame is not None
    assert client.evaluate(final.frame[4:]) == b"" and conn.authenticated
    bad = gate(Clock())
    handshake(bad, "SCRAM-SHA-256", version=0)
    assert asyncio.run(bad.on_frame(b"garbage")) == Reply(None, True)


def test_other_request_during_the_exchange_is_answered_illegal_sasl_state() -> None:
    conn = gate(Clock())
    handshake(conn, "PLAIN")
    reply = send(conn, request(api.LIST_GROUPS, 4, states_filter=()))
    assert reply is not None and reply.close
    assert answer(reply, api.LIST_GROUPS, 4).error_code == ErrorCode.illegal_sasl_state


def test_an_unsupported_api_versions_version_may_be_retried_lower() -> None:
    handlers.load_all()
    conn = gate(Clock())
    too_new = request(api.API_VERSIONS, 4, client_software_name="t",
                      client_software_version="1")
    frame = bytearray(encode_request(1, "test", too_new)[4:])
    frame[2:4] = (99).to_bytes(2, "big")  # ApiVersions v99, as a future client would send
    assert asyncio.run(conn.on_frame(bytes(frame))) is None  # the server answers v0 error
    assert send(conn, too_new) is None  # the retry is served too
    _, body = handshake(conn, "PLAIN")
    assert body.error_code == ErrorCode.none


def test_before_the_handshake_anything_else_is_closed_without_answer() -> None:
    assert send(gate(Clock()), METADATA) == Reply(None, True)


def test_unsupported_mechanism_and_bad_password() -> None:
    reply, body = handshake(gate(Clock()), "GSSAPI")
    assert reply.close and body.error_code == ErrorCode.unsupported_sasl_mechanism
    assert list(body.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
    conn = gate(Clock())
    handshake(conn, "SCRAM-SHA-256")
    client = ScramClient(SHA_256, "bob", "wrong")
    _, first = authenticate(conn, client.first())
    reply, body = authenticate(conn, client.evaluate(bytes(first.auth_bytes)))
    assert reply.close and body.error_code == ErrorCode.sasl_authentication_failed
    assert body.error_message == ("Authentication failed during authentication due to "
                                  "invalid credentials with SASL mechanism SCRAM-SHA-256")


def test_session_lifetime_expiry_and_reauthentication() -> None:
    clock = Clock()
    conn = gate(clock, **{"connections.max.reauth.ms": "1000"})
    handshake(conn, "PLAIN")
    _, body = authenticate(conn, plain_message("alice", "alice-secret"), version=1)
    assert body.session_lifetime.total_seconds() == 1.0
    clock.now_ms = 900
    handshake(conn, "PLAIN")  # re-authentication before the end
    _, body = authenticate(conn, plain_message("alice", "alice-secret"), version=1)
    assert body.error_code == ErrorCode.none
    clock.now_ms = 1800  # within the new session
    assert send(conn, METADATA) is None
    clock.now_ms = 1900
    assert send(conn, METADATA) == Reply(None, True)


def test_unauthenticated_reads_wait_only_until_the_deadline() -> None:
    clock = Clock()
    conn = gate(clock)
    clock.now_ms = 4000
    assert conn.read_timeout_s(600.0) == 6.0
    assert conn.frame_limit(10**8) == 524288
