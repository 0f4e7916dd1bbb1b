"""SASL and SCRAM credential APIs: SaslHandshake (v0-1) and SaslAuthenticate (v0-2) as
dispatched requests, and DescribeUserScramCredentials / AlterUserScramCredentials (v0).

The SASL exchange itself happens before dispatch (oncelog.broker.sasl). A SaslHandshake or
SaslAuthenticate that reaches a handler came on a listener without SASL, or after the
exchange: Kafka answers ILLEGAL_SASL_STATE (KafkaApis.handleSaslHandshakeRequest /
handleSaslAuthenticateRequest).

AlterUserScramCredentials carries salt and salted password; the broker derives the stored
and server keys from them and never sees a password. Errors as Kafka's
ScramControlManager: a user named twice in one request -> DUPLICATE_RESOURCE (none of its
changes applied), an empty name -> UNACCEPTABLE_CREDENTIAL, an unknown mechanism ->
UNSUPPORTED_SASL_MECHANISM, iterations outside 4096..16384 -> UNACCEPTABLE_CREDENTIAL,
deleting a credential that does not exist -> RESOURCE_NOT_FOUND.

Describing needs Describe on the Cluster, altering Alter on it (Kafka's KafkaApis /
ControllerApis): refused, every user named gets CLUSTER_AUTHORIZATION_FAILED without a
message (Describe: at the top level too, its results without user names, as Kafka's
``getErrorResponse``) and nothing changes.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import cluster_allowed
from oncelog.errors import ErrorCode
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation
from oncelog.security.credentials import MECHANISMS, MECHANISMS_BY_TYPE, ScramCredential
from oncelog.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE

log = logging.getLogger(__name__)

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DUPLICATE = "A user credential cannot be altered twice in the same request"
# Kafka sends no message with this error (ApiError drops a generic one). (librdkafka 2.16
# aborts on any top-level DescribeUserScramCredentials error, Kafka's answer included.)
REFUSED = ErrorCode.cluster_authorization_failed


@handles(SASL_HANDSHAKE, 0, 1)
async def handle_sasl_handshake(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(SASL_HANDSHAKE, ctx.api_version)
    return make(mod.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state,
                mechanisms=())


@handles(SASL_AUTHENTICATE, 0, 2)
async def handle_sasl_authenticate(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(SASL_AUTHENTICATE, ctx.api_version)
    return make(mod.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                error_message="SaslAuthenticate request received after successful "
                "authentication", auth_bytes=b"", session_lifetime=0)


async def _known_credentials(ctx: RequestContext) -> dict[str, dict[str, int]]:
    """user -> mechanism -> iterations, up to date (a cluster's may change elsewhere)."""
    store = ctx.services.credentials
    if store is None:
        return {}
    await store.refresh()
    return store.describe()


@handles(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle_describe_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(DESCRIBE_USER_SCRAM_CREDENTIALS, 0)
    if not cluster_allowed(ctx, AclOperation.DESCRIBE):
        return make(mod.DescribeUserScramCredentialsResponse, throttle_time=0,
                    error_code=REFUSED, error_message=None, results=tuple(
                        make(mod.DescribeUserScramCredentialsResult, user="",
                             error_code=REFUSED, error_message=None, credential_infos=())
                        for _ in request.users or ()))
    known = await _known_credentials(ctx)
    wanted = sorted(known) if not request.users else [u.name for u in request.users]
    counts = Counter(wanted)
    results = []
    for user in dict.fromkeys(wanted):
        code, message, infos = ErrorCode.none, None, ()
        if counts[user] > 1:
            code = ErrorCode.duplicate_resource
            message = ("Cannot describe SCRAM credentials for the same user twice in a "
                       f"single request: {user}")
        elif user not in known:
            code = ErrorCode.resource_not_found
            message = f"Attempt to describe a user credential that does not exist: {user}"
        else:
            infos = tuple(make(mod.CredentialInfo, mechanism=MECHANISMS[mech].type,
                               iterations=iterations)
                          for mech, iterations in sorted(known[user].items()))
        results.append(make(mod.DescribeUserScramCredentialsResult, user=user,
                            error_code=code, error_message=message, credential_infos=infos))
    return make(mod.DescribeUserScramCredentialsResponse, throttle_time=0,
                error_code=ErrorCode.none, error_message=None, results=tuple(results))


def _validate(store_known: dict[str, dict[str, int]], name: str, mechanism: int,
              iterations: int | None) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    mech = MECHANISMS_BY_TYPE.get(mechanism)
    if mech is None:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    if iterations is None:  # a deletion
        if mech.name not in store_known.get(name, {}):
            return (ErrorCode.resource_not_found,
                    "Attempt to delete a user credential that does not exist")
        return None
    if iterations < mech.min_iterations:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if iterations > mech.max_iterations:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    return None


@handles(ALTER_USER_SCRAM_CREDENTIALS, 0, 0)
async def handle_alter_user_scram_credentials(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(ALTER_USER_SCRAM_CREDENTIALS, 0)
    if not cluster_allowed(ctx, AclOperation.ALTER):
        users = sorted({e.name for e in (*request.deletions, *request.upsertions)})
        return make(mod.AlterUserScramCredentialsResponse, throttle_time=0, results=tuple(
            make(mod.AlterUserScramCredentialsResult, user=user, error_code=REFUSED,
                 error_message=None) for user in users))
    known = await _known_credentials(ctx)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    deletions: dict[str, tuple[str, str]] = {}
    upserts: dict[str, tuple[tuple[str, str], ScramCredential]] = {}
    for entry in request.deletions:
        if entry.name in errors:
            continue
        if deletions.pop(entry.name, None) is not None:
            errors[entry.name] = (ErrorCode.duplicate_resource, DUPLICATE)
            continue
        error = _validate(known, entry.name, entry.mechanism, None)
        if error is not None:
            errors[entry.name] = error
        else:
            deletions[entry.name] = (entry.name, MECHANISMS_BY_TYPE[entry.mechanism].name)
    for entry in request.upsertions:
        if entry.name in errors:
            continue
        if (deletions.pop(entry.name, None) is not None
                or upserts.pop(entry.name, None) is not None):
            errors[entry.name] = (ErrorCode.duplicate_resource, DUPLICATE)
            continue
        error = _validate(known, entry.name, entry.mechanism, entry.iterations)
        if error is None and (not entry.salt or not entry.salted_password):
            error = (ErrorCode.unacceptable_credential, "Salt and salted password are required")
        if error is not None:
            errors[entry.name] = error
            continue
        mech = MECHANISMS_BY_TYPE[entry.mechanism]
        credential = ScramCredential.from_salted_password(
            mech, bytes(entry.salted_password), bytes(entry.salt), entry.iterations)
        upserts[entry.name] = ((entry.name, mech.name), credential)
    results = [make(mod.AlterUserScramCredentialsResult, user=user, error_code=code,
                    error_message=message) for user, (code, message) in errors.items()]
    if deletions or upserts:
        store = ctx.services.credentials
        if store is None:
            raise RuntimeError("no SCRAM credential store")
        await store.alter(dict(upserts.values()), set(deletions.values()))
        for user in [*deletions, *upserts]:
            results.append(make(mod.AlterUserScramCredentialsResult, user=user,
                                error_code=ErrorCode.none, error_message=None))
        log.info("SCRAM credentials altered by %s: upserted %s, deleted %s",
                 ctx.session.principal, sorted(k for k, _ in upserts.values()),
                 sorted(deletions.values()))
    return make(mod.AlterUserScramCredentialsResponse, throttle_time=0,
                results=tuple(results))
