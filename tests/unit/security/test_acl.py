"""The ACL authorizer's decisions (StandardAuthorizerData's rules), one table row per rule,
and the filters of DescribeAcls / DeleteAcls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.security.acl import (
    AccessControlEntry,
    AclAuthorizer,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    decode_acls,
    encode_acls,
    parse_enum,
    parse_super_users,
)
from oncelog.security.acl_store import FileAclStore
from oncelog.security.principal import KafkaPrincipal, Session

Op = AclOperation
RT = ResourceType
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(name: str, op: AclOperation, perm: AclPermissionType = ALLOW, *,
        principal: str = "User:alice", host: str = "*", pattern: PatternType = LIT,
        rtype: ResourceType = RT.TOPIC) -> AclBinding:
    return AclBinding(ResourcePattern(rtype, name, pattern),
                      AccessControlEntry(principal, host, op, perm))


def session(user: str = "alice", host: str = "10.0.0.1") -> Session:
    return Session(KafkaPrincipal("User", user), host)


# (case, acls, session user, host, operation, resource name, expected)
CASES: list[tuple[str, list[AclBinding], str, str, AclOperation, str, bool]] = [
    ("no acl, default deny", [], "alice", "10.0.0.1", Op.READ, "t", False),
    ("literal allow", [acl("t", Op.READ)], "alice", "10.0.0.1", Op.READ, "t", True),
    ("other operation not allowed", [acl("t", Op.READ)], "alice", "10.0.0.1", Op.WRITE, "t",
     False),
    ("other principal not allowed", [acl("t", Op.READ)], "bob", "10.0.0.1", Op.READ, "t",
     False),
    ("literal is not a prefix", [acl("t", Op.READ)], "alice", "10.0.0.1", Op.READ, "t2", False),
    ("deny beats allow", [acl("t", Op.READ), acl("t", Op.READ, DENY)], "alice", "10.0.0.1",
     Op.READ, "t", False),
    ("deny by prefix beats literal allow", [acl("t", Op.READ), acl("t", Op.READ, DENY,
     pattern=PRE)], "alice", "10.0.0.1", Op.READ, "t", False),
    ("deny for everyone beats allow", [acl("t", Op.READ), acl("t", Op.READ, DENY,
     principal="User:*")], "alice", "10.0.0.1", Op.READ, "t", False),
    ("read implies describe", [acl("t", Op.READ)], "alice", "10.0.0.1", Op.DESCRIBE, "t", True),
    ("write implies describe", [acl("t", Op.WRITE)], "alice", "10.0.0.1", Op.DESCRIBE, "t",
     True),
    ("delete implies describe", [acl("t", Op.DELETE)], "alice", "10.0.0.1", Op.DESCRIBE, "t",
     True),
    ("alter implies describe", [acl("t", Op.ALTER)], "alice", "10.0.0.1", Op.DESCRIBE, "t",
     True),
    ("create does not imply describe", [acl("t", Op.CREATE)], "alice", "10.0.0.1",
     Op.DESCRIBE, "t", False),
    ("alter_configs implies describe_configs", [acl("t", Op.ALTER_CONFIGS)], "alice",
     "10.0.0.1", Op.DESCRIBE_CONFIGS, "t", True),
    ("describe implies nothing else", [acl("t", Op.DESCRIBE)], "alice", "10.0.0.1", Op.READ,
     "t", False),
    ("deny read does not deny describe", [acl("t", Op.ALL), acl("t", Op.READ, DENY)], "alice",
     "10.0.0.1", Op.DESCRIBE, "t", True),
    ("deny all denies describe", [acl("t", Op.READ), acl("t", Op.ALL, DENY)], "alice",
     "10.0.0.1", Op.DESCRIBE, "t", False),
    ("allow all allows two-phase commit", [acl("tx", Op.ALL, rtype=RT.TRANSACTIONAL_ID)],
     "alice", "10.0.0.1", Op.TWO_PHASE_COMMIT, "tx", True),
    ("write does not imply two-phase commit", [acl("tx", Op.WRITE, rtype=RT.TRANSACTIONAL_ID)],
     "alice", "10.0.0.1", Op.TWO_PHASE_COMMIT, "tx", False),
    ("prefixed allow", [acl("orders.", Op.READ, pattern=PRE)], "alice", "10.0.0.1", Op.READ,
     "orders.eu", True),
    ("prefixed does not match a shorter name", [acl("orders.", Op.READ, pattern=PRE)], "alice",
     "10.0.0.1", Op.READ, "orders", False),
    ("wildcard topic", [acl("*", Op.READ)], "alice", "10.0.0.1", Op.READ, "anything", True),
    ("prefixed '*' is not a wildcard", [acl("*", Op.READ, pattern=PRE)], "alice", "10.0.0.1",
     Op.READ, "anything", False),
    ("wildcard principal", [acl("t", Op.READ, principal="User:*")], "bob", "10.0.0.1", Op.READ,
     "t", True),
    ("host matches", [acl("t", Op.READ, host="10.0.0.1")], "alice", "10.0.0.1", Op.READ, "t",
     True),
    ("other host not allowed", [acl("t", Op.READ, host="10.0.0.2")], "alice", "10.0.0.1",
     Op.READ, "t", False),
    ("deny from another host does not apply", [acl("t", Op.READ), acl("t", Op.READ, DENY,
     host="10.0.0.2")], "alice", "10.0.0.1", Op.READ, "t", True),
    ("acls of another resource type do not apply", [acl("t", Op.READ, rtype=RT.GROUP)],
     "alice", "10.0.0.1", Op.READ, "t", False),
    ("cluster resource", [acl("kafka-cluster", Op.IDEMPOTENT_WRITE, rtype=RT.CLUSTER)],
     "alice", "10.0.0.1", Op.IDEMPOTENT_WRITE, "kafka-cluster", True),
]


@pytest.mark.parametrize(("acls", "user", "host", "op", "name", "expected"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_authorize(acls: list[AclBinding], user: str, host: str, op: AclOperation,
                   name: str, expected: bool) -> None:
    authorizer = AclAuthorizer(lambda: frozenset(acls))
    rtype = {"tx": RT.TRANSACTIONAL_ID, "kafka-cluster": RT.CLUSTER}.get(name, RT.TOPIC)
    assert authorizer.authorize(session(user, host), op, rtype, name) is expected


def test_super_users_are_allowed_everything_even_when_denied() -> None:
    denied = frozenset({acl("t", Op.ALL, DENY, principal="User:*")})
    authorizer = AclAuthorizer(lambda: denied,
                               super_users=parse_super_users("User:admin; User:broker-1"))
    assert authorizer.authorize(session("admin"), Op.WRITE, RT.TOPIC, "t")
    assert authorizer.authorize(session("broker-1"), Op.CLUSTER_ACTION, RT.CLUSTER,
                                "kafka-cluster")
    assert not authorizer.authorize(session("alice"), Op.WRITE, RT.TOPIC, "t")


# Kafka's authorizeByResourceType (an idempotent producer's "Write on any topic"):
# (case, acls, operation, expected)
ANY_CASES: list[tuple[str, list[AclBinding], AclOperation, bool]] = [
    ("no acl", [], Op.WRITE, False),
    ("a literal allow", [acl("t", Op.WRITE)], Op.WRITE, True),
    ("a prefixed allow", [acl("orders.", Op.WRITE, pattern=PRE)], Op.WRITE, True),
    ("ALL allows the operation", [acl("t", Op.ALL)], Op.WRITE, True),
    ("no implication: READ does not give DESCRIBE here", [acl("t", Op.READ)], Op.DESCRIBE,
     False),
    ("another operation", [acl("t", Op.READ)], Op.WRITE, False),
    ("another principal", [acl("t", Op.WRITE, principal="User:bob")], Op.WRITE, False),
    ("everyone's allow", [acl("t", Op.WRITE, principal="User:*")], Op.WRITE, True),
    ("another host", [acl("t", Op.WRITE, host="10.9.9.9")], Op.WRITE, False),
    ("the same literal denied", [acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)], Op.WRITE,
     False),
    ("denied by a prefix of it", [acl("orders.eu", Op.WRITE), acl("ord", Op.WRITE, DENY,
     pattern=PRE)], Op.WRITE, False),
    ("a prefixed allow under a prefixed deny", [acl("orders.eu", Op.WRITE, pattern=PRE),
     acl("orders.", Op.WRITE, DENY, pattern=PRE)], Op.WRITE, False),
    ("one allow left undenied is enough", [acl("a", Op.WRITE), acl("b", Op.WRITE),
     acl("a", Op.WRITE, DENY)], Op.WRITE, True),
    ("a literal deny does not cover a prefixed allow", [acl("t", Op.WRITE, pattern=PRE),
     acl("t", Op.WRITE, DENY)], Op.WRITE, True),
    ("a wildcard allow", [acl("*", Op.WRITE)], Op.WRITE, True),
    ("a wildcard deny is final", [acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)], Op.WRITE,
     False),
    ("other resource types do not count", [acl("t", Op.WRITE, rtype=RT.GROUP)], Op.WRITE,
     False),
]


@pytest.mark.parametrize(("acls", "op", "expected"), [c[1:] for c in ANY_CASES],
                         ids=[c[0] for c in ANY_CASES])
def test_authorize_any(acls: list[AclBinding], op: AclOperation, expected: bool) -> None:
    authorizer = AclAuthorizer(lambda: frozenset(acls))
    assert authorizer.authorize_any(session(), op, RT.TOPIC) is expected


def test_authorize_any_for_super_users_and_everyone_if_no_acl() -> None:
    denied = frozenset({acl("*", Op.WRITE, DENY, principal="User:*")})
    assert AclAuthorizer(lambda: denied, super_users={"User:admin"}).authorize_any(
        session("admin"), Op.WRITE, RT.TOPIC)
    assert AclAuthorizer(lambda: frozenset(), allow_everyone_if_no_acl_found=True
                         ).authorize_any(session(), Op.WRITE, RT.TOPIC)


@pytest.mark.parametrize("everyone", [True, False])
def test_allow_everyone_if_no_acl_found(everyone: bool) -> None:
    acls = frozenset({acl("guarded", Op.READ, principal="User:bob")})
    authorizer = AclAuthorizer(lambda: acls, allow_everyone_if_no_acl_found=everyone)
    # a resource without any ACL: the setting decides
    assert authorizer.authorize(session(), Op.WRITE, RT.TOPIC, "open") is everyone
    # a resource with an ACL (for someone else): denied either way
    assert not authorizer.authorize(session(), Op.READ, RT.TOPIC, "guarded")


def test_decisions_follow_the_source_without_rebuilding() -> None:
    current: list[frozenset[AclBinding]] = [frozenset()]
    authorizer = AclAuthorizer(lambda: current[0])
    assert not authorizer.authorize(session(), Op.READ, RT.TOPIC, "t")
    current[0] = frozenset({acl("t", Op.READ)})
    assert authorizer.authorize(session(), Op.READ, RT.TOPIC, "t")


def test_authorized_operations() -> None:
    authorizer = AclAuthorizer(lambda: frozenset({acl("t", Op.WRITE)}))
    ops = authorizer.authorized_operations(session(), RT.TOPIC, "t",
                                           (Op.READ, Op.WRITE, Op.DESCRIBE))
    assert ops == {Op.WRITE, Op.DESCRIBE}


# -- filters ---------------------------------------------------------------------------------
LIT_T = acl("t", Op.READ)
PRE_T = acl("t", Op.WRITE, pattern=PRE)
STAR = acl("*", Op.READ, principal="User:bob")
OTHER = acl("u", Op.READ, host="10.0.0.9")
GROUP = acl("t", Op.READ, rtype=RT.GROUP)
ALL_ACLS = [LIT_T, PRE_T, STAR, OTHER, GROUP]


@pytest.mark.parametrize(("flt", "expected"), [
    (AclBindingFilter(), ALL_ACLS),
    (AclBindingFilter(RT.TOPIC), [LIT_T, PRE_T, STAR, OTHER]),
    (AclBindingFilter(RT.TOPIC, "t"), [LIT_T, PRE_T]),
    (AclBindingFilter(RT.TOPIC, "t", LIT), [LIT_T]),
    (AclBindingFilter(RT.TOPIC, None, PRE), [PRE_T]),
    (AclBindingFilter(RT.TOPIC, "tx", PatternType.MATCH), [PRE_T, STAR]),
    (AclBindingFilter(RT.TOPIC, "t", PatternType.MATCH), [LIT_T, PRE_T, STAR]),
    (AclBindingFilter(principal="User:bob"), [STAR]),
    (AclBindingFilter(host="10.0.0.9"), [OTHER]),
    (AclBindingFilter(operation=Op.WRITE), [PRE_T]),
    (AclBindingFilter(permission=DENY), []),
], ids=["any", "type", "name-any-pattern", "literal", "prefixed", "match-prefix+wildcard",
        "match-exact", "principal", "host", "operation", "permission"])
def test_filter_matches(flt: AclBindingFilter, expected: list[AclBinding]) -> None:
    assert [b for b in ALL_ACLS if flt.matches(b)] == expected


@pytest.mark.parametrize("binding", [
    acl("t", Op.ANY), acl("t", Op.UNKNOWN), acl("t", Op.READ, AclPermissionType.ANY),
    acl("t", Op.READ, pattern=PatternType.MATCH), acl("t", Op.READ, pattern=PatternType.ANY),
    acl("t", Op.READ, rtype=RT.ANY), acl("", Op.READ),
    acl("my-cluster", Op.ALTER, rtype=RT.CLUSTER), acl("t", Op.READ, principal="alice"),
])
def test_invalid_bindings_are_refused(binding: AclBinding) -> None:
    with pytest.raises(AclError):
        binding.validate()


def test_unknown_filter_elements_are_refused() -> None:
    for bad in (AclBindingFilter(pattern_type=PatternType.UNKNOWN),
                AclBindingFilter(operation=Op.UNKNOWN)):
        with pytest.raises(AclError):
            bad.validate()
    AclBindingFilter().validate()


def test_unknown_codes_decode_as_unknown() -> None:
    binding = AclBinding.of(99, "t", 3, "User:a", "*", 99, 3)
    assert binding.pattern.resource_type == RT.UNKNOWN
    assert binding.entry.operation == Op.UNKNOWN


def test_codes_are_kafkas() -> None:
    assert (Op.TWO_PHASE_COMMIT, Op.IDEMPOTENT_WRITE, Op.ALL) == (15, 12, 2)
    assert (RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID) == (2, 3, 4, 5)
    assert (PatternType.MATCH, LIT, PRE) == (2, 3, 4)
    assert (DENY, ALLOW) == (2, 3)
    assert parse_enum(AclOperation, "TwoPhaseCommit") == Op.TWO_PHASE_COMMIT
    assert parse_enum(AclOperation, "idempotent-write") == Op.IDEMPOTENT_WRITE


def test_file_store_round_trip(tmp_path: Path) -> None:
    store = FileAclStore(tmp_path)
    asyncio.run(store.create([LIT_T, PRE_T, STAR]))
    deleted = asyncio.run(store.delete([AclBindingFilter(RT.TOPIC, "*", LIT)]))
    assert deleted == [[STAR]]
    assert FileAclStore(tmp_path).current() == {LIT_T, PRE_T}
    assert decode_acls(encode_acls([LIT_T])) == {LIT_T}
