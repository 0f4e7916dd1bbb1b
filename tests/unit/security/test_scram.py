"""SCRAM exchanges: the RFC 7677 test vector, both sides against each other, and refusals
(wrong password, unknown user, out-of-order and garbled messages)."""

from __future__ import annotations

import base64

import pytest

from oncelog.security.credentials import SHA_256, SHA_512, ScramCredential, ScramMechanism
from oncelog.security.sasl import AuthenticationFailed, IllegalSaslState, InvalidCredentials
from oncelog.security.scram import ClientState, ScramClient, ScramServer, ServerState

# RFC 7677 section 3
CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
SERVER_NONCE_PART = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
SERVER_FIRST = (b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
CLIENT_FINAL = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _server(credential: ScramCredential | None, mech: ScramMechanism = SHA_256,
            user: str = "user") -> ScramServer:
    return ScramServer(mech, lambda name: credential if name == user else None,
                       nonce=lambda: SERVER_NONCE_PART)


def test_rfc7677_server_side() -> None:
    server = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    assert server.evaluate(CLIENT_FIRST) == SERVER_FIRST
    assert server.evaluate(CLIENT_FINAL) == SERVER_FINAL
    assert server.complete and server.username == "user"


def test_rfc7677_client_side() -> None:
    client = ScramClient(SHA_256, "user", "pencil", nonce=lambda: CLIENT_NONCE)
    assert client.first() == CLIENT_FIRST
    assert client.evaluate(SERVER_FIRST) == CLIENT_FINAL
    assert client.evaluate(SERVER_FINAL) == b""
    assert client.complete


@pytest.mark.parametrize("mech", [SHA_256, SHA_512])
def test_client_and_server_agree(mech: ScramMechanism) -> None:
    server = _server(ScramCredential.from_password(mech, "s3cret", b"salty", 4096), mech,
                     user="a,b=c")
    client = ScramClient(mech, "a,b=c", "s3cret")
    final = client.evaluate(server.evaluate(client.first()))
    assert client.evaluate(server.evaluate(final)) == b""
    assert server.username == "a,b=c" and client.complete


def test_wrong_password_and_unknown_user_are_invalid_credentials() -> None:
    credential = ScramCredential.from_password(SHA_256, "pencil", SALT, 4096)
    server = _server(credential)
    client = ScramClient(SHA_256, "user", "crayon")
    final = client.evaluate(server.evaluate(client.first()))
    with pytest.raises(InvalidCredentials):
        server.evaluate(final)
    assert server.state is ServerState.FAILED
    with pytest.raises(InvalidCredentials):
        _server(credential).evaluate(b"n,,n=nobody,r=abc")


def test_out_of_order_and_after_failure() -> None:
    server = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    with pytest.raises(InvalidCredentials):  # a client-final first is not a client-first
        server.evaluate(CLIENT_FINAL)
    with pytest.raises(IllegalSaslState):
        server.evaluate(CLIENT_FIRST)
    done = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    done.evaluate(CLIENT_FIRST)
    done.evaluate(CLIENT_FINAL)
    with pytest.raises(IllegalSaslState):
        done.evaluate(CLIENT_FINAL)
    client = ScramClient(SHA_256, "user", "pencil")
    with pytest.raises(IllegalSaslState):
        client.evaluate(SERVER_FIRST)
    with pytest.raises(IllegalSaslState):  # a failed exchange stays failed
        client.first()
    client = ScramClient(SHA_256, "user", "pencil")
    client.first()
    with pytest.raises(IllegalSaslState):
        client.first()


def test_nonce_must_continue_the_servers() -> None:
    server = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    server.evaluate(CLIENT_FIRST)
    with pytest.raises(InvalidCredentials, match="nonce"):
        server.evaluate(CLIENT_FINAL.replace(b"k0,p=", b"k1,p="))


def test_client_refuses_a_server_nonce_not_extending_its_own() -> None:
    client = ScramClient(SHA_256, "user", "pencil", nonce=lambda: CLIENT_NONCE)
    client.first()
    with pytest.raises(InvalidCredentials):
        client.evaluate(b"r=other,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert client.state is ClientState.FAILED


def test_iteration_floor_on_both_sides() -> None:
    weak = ScramCredential.from_password(SHA_256, "pencil", SALT, 1000)
    with pytest.raises(InvalidCredentials, match="less than the minimum 4096"):
        _server(weak).evaluate(CLIENT_FIRST)
    client = ScramClient(SHA_256, "user", "pencil", nonce=lambda: CLIENT_NONCE)
    client.first()
    with pytest.raises(InvalidCredentials, match="minimum"):
        client.evaluate(SERVER_FIRST.replace(b"i=4096", b"i=1000"))


def test_authzid_must_be_the_user() -> None:
    server = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    with pytest.raises(AuthenticationFailed, match="authorization id"):
        server.evaluate(b"n,a=admin,n=user,r=abc")
    same = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    assert same.evaluate(b"n,a=user,n=user,r=abc,ext=1").startswith(b"r=abc")


@pytest.mark.parametrize("garbage", [
    b"", b"n,,", b"y,,n=user,r=abc", b"p=tls,,n=user,r=abc", b"n,,n=user", b"\xff\xfe",
    b"n,,n=user,r=a,b", b"n,,n==XY,r=abc",
])
def test_garbled_client_first_is_refused(garbage: bytes) -> None:
    server = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
    with pytest.raises(InvalidCredentials):
        server.evaluate(garbage)


def test_garbled_client_final_is_refused() -> None:
    for garbage in (b"c=biws", CLIENT_FINAL[:-3], b"c=biws,r=x,p=", CLIENT_FINAL + b"\x00",
                    CLIENT_FINAL.replace(b"p=dHzb", b"p=!Hzb"),
                    CLIENT_FINAL.replace(b"c=biws", b"c=eSws")):
        server = _server(ScramCredential.from_password(SHA_256, "pencil", SALT, 4096))
        server.evaluate(CLIENT_FIRST)
        with pytest.raises(InvalidCredentials):
            server.evaluate(garbage)
