"""Hypothesis-generated SASL exchanges against one SASL_PLAINTEXT broker over raw sockets:
random handshakes (known, unknown and garbage mechanisms, v0 and v1), truncated and garbled
SCRAM and PLAIN tokens, requests out of order, frames cut short. Whatever comes, the broker
answers or closes that one connection, and a good client still authenticates afterwards."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.client import Admin
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import LOOPBACK, free_port

pytestmark = pytest.mark.integration

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_alice="alice-secret";')
CONFIGS: dict[str, Any] = {
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
    "connections.max.idle.ms": 2000,
    # Not what this test is about (test_sasl.py checks the delay): a failed login closes
    # its connection at once instead of 100 ms later.
    "connection.failed.authentication.delay.ms": 0,
}

# How long to read after each message before sending the next one: the broker either
# answers, closes the connection or waits for more. Not a check: a message sent earlier or
# later is fuzz all the same.
READ_WINDOW_S = 0.05


def frame(api_key: int, version: int, body: bytes, correlation: int = 1) -> bytes:
    head = struct.pack(">hhih", api_key, version, correlation, 4) + b"fuzz"
    if api_key == 36 and version >= 2:
        head += b"\0"  # flexible request header: no tagged fields
    return struct.pack(">i", len(head) + len(body)) + head + body


def string(text: bytes) -> bytes:
    return struct.pack(">h", len(text)) + text


def auth_bytes(token: bytes, version: int) -> bytes:
    if version >= 2:  # compact bytes, then the body's tagged fields
        return _uvarint(len(token) + 1) + token + b"\0"
    return struct.pack(">i", len(token)) + token


def _uvarint(value: int) -> bytes:
    out = b""
    while value >= 0x80:
        out += bytes([(value & 0x7F) | 0x80])
        value >>= 7
    return out + bytes([value])


MECHANISMS = st.sampled_from([b"PLAIN", b"SCRAM-SHA-256", b"SCRAM-SHA-512", b"GSSAPI",
                              b"", b"scram-sha-256"]) | st.binary(max_size=40)
TOKENS = st.one_of(
    st.binary(max_size=200),
    st.sampled_from([b"\0alice\0alice-secret", b"\0alice\0wrong", b"x\0alice\0alice-secret",
                     b"n,,n=alice,r=abc", b"n,,n=,r=", b"c=biws,r=abc,p=AAAA",
                     b"n,a=bob,n=alice,r=xyz", b"p=tls-unique,,n=a,r=b"]),
    st.builds(lambda head, cut: head[:cut], st.just(b"n,,n=alice,r=0123456789abcdef"),
              st.integers(0, 30)),
)


@st.composite
def messages(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["handshake", "authenticate", "api_versions", "metadata",
                                 "raw", "truncated"]))
    if kind == "handshake":
        return frame(17, draw(st.integers(0, 2)), string(draw(MECHANISMS)))
    if kind == "authenticate":
        version = draw(st.integers(0, 3))
        return frame(36, version, auth_bytes(draw(TOKENS), version))
    if kind == "api_versions":
        return frame(18, draw(st.integers(0, 5)), draw(st.binary(max_size=10)))
    if kind == "metadata":
        return frame(3, 1, struct.pack(">i", -1))
    if kind == "raw":  # a v0-style token without a Kafka header
        token = draw(TOKENS)
        return struct.pack(">i", len(token)) + token
    whole = frame(17, 1, string(b"PLAIN"))
    return whole[: draw(st.integers(0, len(whole) - 1))]


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, int]]:
    """The broker and the port of its SASL_PLAINTEXT listener."""
    port = free_port(LOOPBACK)
    broker = BrokerProcess(tmp_path_factory.mktemp("sasl-fuzz") / "data", configs={
        **CONFIGS, "listeners": f"SASL_PLAINTEXT://{LOOPBACK}:{port}"})
    try:
        broker.start()
        yield broker, port
    finally:
        broker.kill()


def play(port: int, exchange: list[bytes]) -> None:
    """Send the messages, reading whatever comes back, until the broker closes."""
    with socket.create_connection((LOOPBACK, port), timeout=5) as sock:
        for message in exchange:
            try:
                sock.sendall(message)
                sock.settimeout(READ_WINDOW_S)
                while sock.recv(65536):
                    pass
                return  # closed by the broker
            except TimeoutError:
                continue  # answered (or waiting for more): send the next message
            except (BrokenPipeError, ConnectionResetError):
                return


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(exchange=st.lists(messages(), min_size=1, max_size=5))
def test_random_sasl_exchanges_never_crash_the_broker(
        fuzz_broker: tuple[BrokerProcess, int], exchange: list[bytes]) -> None:
    broker, port = fuzz_broker
    play(port, exchange)
    assert broker.is_running


def test_a_good_client_still_authenticates_after_the_fuzz(
        fuzz_broker: tuple[BrokerProcess, int]) -> None:
    broker, port = fuzz_broker
    conf = {"bootstrap.servers": f"{LOOPBACK}:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice",
            "sasl.password": "alice-secret"}
    with Admin(conf) as admin:
        admin.list_topics()
    log = broker.log_path.read_text()
    assert "Traceback" not in log and "failed; answering" not in log
