"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them, sans-IO.

``ScramServer.evaluate(token)`` answers client-first with server-first and client-final
with server-final; ``ScramClient`` is the other side. Kafka's rules (ScramSaslServer,
ScramMessages, ScramMechanism): gs2 header ``n`` only (no channel binding), an authzid if
given must equal the user name, extensions are accepted and ignored, a credential with fewer
than 4096 iterations is refused, and the client refuses a server asking for fewer than 4096;
the final nonce must be the client's followed by the server's.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hmac
import re
import secrets
from collections.abc import Callable

from oncelog.security.credentials import ScramCredential, ScramMechanism
from oncelog.security.sasl import AuthenticationFailed, IllegalSaslState, InvalidCredentials

_SASLNAME = r"(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_VALUE = r"[\x01-\x2b\x2d-\x7f]+"
_B64 = r"(?:[a-zA-Z0-9/+]{4})*(?:[a-zA-Z0-9/+]{3}=|[a-zA-Z0-9/+]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?:m={_VALUE},)?n=(?P<name>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<ext>{_EXTENSIONS})")
SERVER_FIRST = re.compile(
    rf"(?:m={_VALUE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_B64}),i=(?P<iterations>[0-9]+)"
    rf"{_EXTENSIONS}")
CLIENT_FINAL = re.compile(
    rf"c=(?P<channel>{_B64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS},p=(?P<proof>{_B64})")
SERVER_FINAL = re.compile(rf"(?:e=(?P<error>{_VALUE})|v=(?P<verifier>{_B64})){_EXTENSIONS}")
GS2_HEADER = b"n,,"


def escape_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def new_nonce() -> str:
    return secrets.token_urlsafe(24)


def _match(pattern: re.Pattern[str], token: bytes, what: str) -> re.Match[str]:
    try:
        text = token.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidCredentials(f"invalid SCRAM {what}: not ASCII") from None
    found = pattern.fullmatch(text)
    if found is None:
        raise InvalidCredentials(f"invalid SCRAM {what}")
    return found


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise InvalidCredentials("invalid base64 in a SCRAM message") from None


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


class ServerState(enum.Enum):
    RECEIVE_CLIENT_FIRST = "RECEIVE_CLIENT_FIRST"
    RECEIVE_CLIENT_FINAL = "RECEIVE_CLIENT_FINAL"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramServer:
    """One server exchange; ``lookup(user)`` returns the user's credential for this
    mechanism or None. Any failure leaves the exchange FAILED."""

    def __init__(self, mechanism: ScramMechanism,
                 lookup: Callable[[str], ScramCredential | None],
                 nonce: Callable[[], str] = new_nonce) -> None:
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self.state = ServerState.RECEIVE_CLIENT_FIRST
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""

    @property
    def complete(self) -> bool:
        return self.state is ServerState.COMPLETE

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self.state is ServerState.RECEIVE_CLIENT_FIRST:
                return self._on_client_first(token)
            if self.state is ServerState.RECEIVE_CLIENT_FINAL:
                return self._on_client_final(token)
            raise IllegalSaslState(f"Unexpected challenge in Sasl server state {self.state.value}")
        except BaseException:
            self.state = ServerState.FAILED
            raise

    def _on_client_first(self, token: bytes) -> bytes:
        found = _match(CLIENT_FIRST, token, "client-first message")
        username = unescape_name(found["name"])
        credential = self._lookup(username)
        if credential is None:
            raise InvalidCredentials("Authentication failed: Invalid user credentials")
        authzid = found["authzid"]
        if authzid and unescape_name(authzid) != username:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        if credential.iterations < self.mechanism.min_iterations:
            raise InvalidCredentials(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{self.mechanism.min_iterations} for {self.mechanism.name}")
        self.username = username
        self._credential = credential
        self._client_first_bare = token.decode("ascii")[token.index(b",", 2) + 1:]
        nonce = found["nonce"] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={nonce},s={salt},i={credential.iterations}"
        self.state = ServerState.RECEIVE_CLIENT_FINAL
        return self._server_first.encode()

    def _on_client_final(self, token: bytes) -> bytes:
        found = _match(CLIENT_FINAL, token, "client-final message")
        assert self._credential is not None
        server_nonce = self._server_first.split(",", 1)[0][2:]
        if found["nonce"] != server_nonce:
            raise InvalidCredentials("Invalid client nonce in the final client message.")
        if _b64decode(found["channel"]) != GS2_HEADER:
            raise InvalidCredentials("Invalid channel binding in the final client message.")
        text = token.decode("ascii")
        without_proof = text[: text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}"
        mech = self.mechanism
        signature = mech.hmac(self._credential.stored_key, auth_message.encode())
        proof = _b64decode(found["proof"])
        if len(proof) != len(signature):
            raise InvalidCredentials("Invalid client credentials")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(mech.digest(client_key), self._credential.stored_key):
            raise InvalidCredentials("Invalid client credentials")
        server_signature = mech.hmac(self._credential.server_key, auth_message.encode())
        self._credential = None
        self.state = ServerState.COMPLETE
        return b"v=" + base64.b64encode(server_signature)


class ClientState(enum.Enum):
    SEND_CLIENT_FIRST = "SEND_CLIENT_FIRST"
    RECEIVE_SERVER_FIRST = "RECEIVE_SERVER_FIRST"
    RECEIVE_SERVER_FINAL = "RECEIVE_SERVER_FINAL"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class ScramClient:
    """One client exchange: ``first()``, then ``evaluate(server-first)`` -> client-final,
    then ``evaluate(server-final)`` -> b"" (the server's signature checked)."""

    def __init__(self, mechanism: ScramMechanism, username: str, password: str,
                 nonce: Callable[[], str] = new_nonce) -> None:
        self.mechanism = mechanism
        self.username = username
        self._password = password
        self._nonce = nonce()
        self.state = ClientState.SEND_CLIENT_FIRST
        self._client_first_bare = ""
        self._server_signature = b""

    @property
    def complete(self) -> bool:
        return self.state is ClientState.COMPLETE

    def first(self) -> bytes:
        if self.state is not ClientState.SEND_CLIENT_FIRST:
            raise IllegalSaslState(f"client-first message in state {self.state.value}")
        self._client_first_bare = f"n={escape_name(self.username)},r={self._nonce}"
        self.state = ClientState.RECEIVE_SERVER_FIRST
        return GS2_HEADER + self._client_first_bare.encode()

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self.state is ClientState.RECEIVE_SERVER_FIRST:
                return self._on_server_first(token)
            if self.state is ClientState.RECEIVE_SERVER_FINAL:
                return self._on_server_final(token)
            raise IllegalSaslState(f"server message in client state {self.state.value}")
        except BaseException:
            self.state = ClientState.FAILED
            raise

    def _on_server_first(self, token: bytes) -> bytes:
        found = _match(SERVER_FIRST, token, "server-first message")
        nonce = found["nonce"]
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise InvalidCredentials("Invalid server nonce: does not start with client nonce")
        iterations = int(found["iterations"])
        mech = self.mechanism
        if iterations < mech.min_iterations:
            raise InvalidCredentials(f"Requested iterations {iterations} is less than the "
                                     f"minimum {mech.min_iterations} for {mech.name}")
        salt = _b64decode(found["salt"])
        salted = mech.salted_password(self._password, salt, iterations)
        without_proof = f"c={base64.b64encode(GS2_HEADER).decode()},r={nonce}"
        auth_message = f"{self._client_first_bare},{token.decode('ascii')},{without_proof}"
        client_key = mech.hmac(salted, b"Client Key")
        signature = mech.hmac(mech.digest(client_key), auth_message.encode())
        proof = base64.b64encode(_xor(client_key, signature)).decode()
        server_key = mech.hmac(salted, b"Server Key")
        self._server_signature = mech.hmac(server_key, auth_message.encode())
        self.state = ClientState.RECEIVE_SERVER_FINAL
        return f"{without_proof},p={proof}".encode()

    def _on_server_final(self, token: bytes) -> bytes:
        found = _match(SERVER_FINAL, token, "server-final message")
        if found["error"]:
            raise AuthenticationFailed(f"SCRAM server error: {found['error']}")
        if not hmac.compare_digest(_b64decode(found["verifier"]), self._server_signature):
            raise InvalidCredentials("Invalid server signature in server final message")
        self.state = ClientState.COMPLETE
        return b""
