"""SCRAM credentials as Kafka stores them (RFC 5802): never a password, only the salt, the
iteration count and the keys derived from the salted password, ``StoredKey = H(ClientKey)``
and ``ServerKey = HMAC(SaltedPassword, "Server Key")``.

``CredentialStore`` is what the broker needs: a synchronous ``lookup`` for the SCRAM
exchange (answered from memory, brought up to date by ``refresh``), and ``describe`` /
``alter`` for the DescribeUserScramCredentials / AlterUserScramCredentials APIs.
``FileCredentialStore`` keeps them in ``scram-credentials.json`` in the data directory (one
node), written with the project's atomic writer; a cluster keeps them in the metadata store
(oncelog.broker.cluster.credentials).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from oncelog.storage.files import atomic_write

log = logging.getLogger(__name__)

CREDENTIALS_FILE = "scram-credentials.json"


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    type: int  # Kafka's ScramMechanism code in the *UserScramCredentials APIs
    hash_name: str
    min_iterations: int = 4096
    max_iterations: int = 16384

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        """RFC 5802 Hi(): PBKDF2 with this mechanism's HMAC."""
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)


SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = {m.name: m for m in (SHA_256, SHA_512)}
MECHANISMS_BY_TYPE = {m.type: m for m in (SHA_256, SHA_512)}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(cls, mechanism: ScramMechanism, salted: bytes, salt: bytes,
                             iterations: int) -> ScramCredential:
        client_key = mechanism.hmac(salted, b"Client Key")
        return cls(salt, mechanism.digest(client_key), mechanism.hmac(salted, b"Server Key"),
                   iterations)

    @classmethod
    def from_password(cls, mechanism: ScramMechanism, password: str, salt: bytes,
                      iterations: int) -> ScramCredential:
        salted = mechanism.salted_password(password, salt, iterations)
        return cls.from_salted_password(mechanism, salted, salt, iterations)

    def to_json(self) -> dict[str, str | int]:
        b64 = base64.b64encode
        return {"salt": b64(self.salt).decode(), "stored_key": b64(self.stored_key).decode(),
                "server_key": b64(self.server_key).decode(), "iterations": self.iterations}

    @classmethod
    def from_json(cls, raw: dict[str, str | int]) -> ScramCredential:
        dec = base64.b64decode
        return cls(dec(str(raw["salt"])), dec(str(raw["stored_key"])),
                   dec(str(raw["server_key"])), int(raw["iterations"]))


# user -> mechanism name -> credential
Credentials = dict[str, dict[str, ScramCredential]]


class CredentialStore(Protocol):
    def lookup(self, username: str, mechanism: str) -> ScramCredential | None: ...

    def describe(self) -> dict[str, dict[str, int]]:
        """user -> mechanism name -> iterations."""
        ...

    async def alter(self, upserts: dict[tuple[str, str], ScramCredential],
                    deletions: set[tuple[str, str]]) -> None:
        """Apply every change at once ((user, mechanism) keys; deletions must exist)."""
        ...

    async def refresh(self) -> None:
        """Bring the in-memory answers up to date (before a SCRAM login, a describe)."""
        ...


def encode_credentials(credentials: Credentials) -> bytes:
    raw = {user: {mech: cred.to_json() for mech, cred in sorted(by_mech.items())}
           for user, by_mech in sorted(credentials.items()) if by_mech}
    return json.dumps({"version": 1, "users": raw}, indent=1).encode()


def decode_credentials(data: bytes) -> Credentials:
    raw = json.loads(data)
    return {user: {mech: ScramCredential.from_json(cred) for mech, cred in by_mech.items()}
            for user, by_mech in raw.get("users", {}).items()}


def apply_changes(credentials: Credentials, upserts: dict[tuple[str, str], ScramCredential],
                  deletions: set[tuple[str, str]]) -> Credentials:
    """A new map with the changes applied (the input is not modified)."""
    result = {user: dict(by_mech) for user, by_mech in credentials.items()}
    for user, mech in deletions:
        result.get(user, {}).pop(mech, None)
    for (user, mech), cred in upserts.items():
        result.setdefault(user, {})[mech] = cred
    return {user: by_mech for user, by_mech in result.items() if by_mech}


class MemoryCredentials:
    """The in-memory map every store answers lookups from."""

    def __init__(self, credentials: Credentials | None = None) -> None:
        self.credentials: Credentials = credentials or {}

    def lookup(self, username: str, mechanism: str) -> ScramCredential | None:
        return self.credentials.get(username, {}).get(mechanism)

    def describe(self) -> dict[str, dict[str, int]]:
        return {user: {mech: cred.iterations for mech, cred in by_mech.items()}
                for user, by_mech in self.credentials.items()}

    async def refresh(self) -> None:
        """Nothing to do: this map is the only copy."""

    async def alter(self, upserts: dict[tuple[str, str], ScramCredential],
                    deletions: set[tuple[str, str]]) -> None:
        self.credentials = apply_changes(self.credentials, upserts, deletions)


class FileCredentialStore(MemoryCredentials):
    """One node: ``scram-credentials.json`` in the data directory."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / CREDENTIALS_FILE
        super().__init__(decode_credentials(self.path.read_bytes())
                         if self.path.exists() else {})
        if self.credentials:
            log.info("SCRAM credentials of %d users loaded from %s", len(self.credentials),
                     self.path)

    async def alter(self, upserts: dict[tuple[str, str], ScramCredential],
                    deletions: set[tuple[str, str]]) -> None:
        updated = apply_changes(self.credentials, upserts, deletions)
        atomic_write(self.path, encode_credentials(updated))
        self.credentials = updated
