"""The asyncio admin client's SCRAM users: DescribeUserScramCredentials and
AlterUserScramCredentials (KIP-554), as Kafka's Admin offers them. The password never leaves
the client: an upsertion sends the salt and the salted password (RFC 5802 Hi()), computed
here with a fresh random salt.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field

from oncelog.client.aio.admin_types import AdminBase
from oncelog.client.errors import KafkaClientError, error_for
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from oncelog.security.credentials import MECHANISMS, MECHANISMS_BY_TYPE

DEFAULT_ITERATIONS = 4096


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    user: str
    mechanism: str  # SCRAM-SHA-256 or SCRAM-SHA-512
    password: str = field(repr=False)
    iterations: int = DEFAULT_ITERATIONS


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    user: str
    mechanism: str


def _mechanism_type(name: str) -> int:
    mechanism = MECHANISMS.get(name.upper())
    return 0 if mechanism is None else mechanism.type  # 0: Kafka's UNKNOWN


class ScramAdmin(AdminBase):
    """SCRAM credentials; mixed into ``AIOAdmin``."""

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, dict[str, int] | KafkaClientError]:
        """user -> {mechanism: iterations}, or the user's error (e.g. RESOURCE_NOT_FOUND);
        ``users`` None: every user with a credential."""
        names = None if users is None else list(users)
        conn = await self.client.any_connection()
        version = conn.version(api.DESCRIBE_USER_SCRAM_CREDENTIALS)
        response = await conn.send(request(
            api.DESCRIBE_USER_SCRAM_CREDENTIALS, version,
            users=None if names is None else tuple(
                nested(api.DESCRIBE_USER_SCRAM_CREDENTIALS, version, "UserName", name=n)
                for n in names)))
        if response.error_code != ErrorCode.none:
            raise error_for(response.error_code, response.error_message or
                            "DescribeUserScramCredentials")
        result: dict[str, dict[str, int] | KafkaClientError] = {}
        for entry in response.results:
            if entry.error_code != ErrorCode.none:
                result[entry.user] = error_for(entry.error_code, entry.error_message or "")
                continue
            result[entry.user] = {
                MECHANISMS_BY_TYPE[int(info.mechanism)].name: int(info.iterations)
                for info in entry.credential_infos if int(info.mechanism) in MECHANISMS_BY_TYPE}
        return result

    async def alter_user_scram_credentials(
        self, alterations: Iterable[ScramUpsertion | ScramDeletion]
    ) -> dict[str, KafkaClientError | None]:
        """Each user's outcome: None for success, else its error."""
        upserts, deletions = [], []
        version = 0
        for item in alterations:
            mechanism = _mechanism_type(item.mechanism)
            if isinstance(item, ScramUpsertion):
                scram = MECHANISMS_BY_TYPE.get(mechanism)
                salt = secrets.token_bytes(32)
                salted = (scram.salted_password(item.password, salt, item.iterations)
                          if scram is not None else b"")
                upserts.append(nested(
                    api.ALTER_USER_SCRAM_CREDENTIALS, version, "ScramCredentialUpsertion",
                    name=item.user, mechanism=mechanism, iterations=item.iterations,
                    salt=salt, salted_password=salted))
            else:
                deletions.append(nested(
                    api.ALTER_USER_SCRAM_CREDENTIALS, version, "ScramCredentialDeletion",
                    name=item.user, mechanism=mechanism))
        conn = await self.client.any_connection()
        response = await conn.send(request(api.ALTER_USER_SCRAM_CREDENTIALS, version,
                                           deletions=tuple(deletions),
                                           upsertions=tuple(upserts)))
        return {
            r.user: None if r.error_code == ErrorCode.none
            else error_for(r.error_code, r.error_message or "")
            for r in response.results
        }
