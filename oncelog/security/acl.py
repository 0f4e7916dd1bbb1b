"""ACLs and the ACL authorizer, sans-IO, as Kafka's StandardAuthorizer decides.

The enums carry Kafka's codes (``org.apache.kafka.common.acl.AclOperation`` /
``AclPermissionType``, ``org.apache.kafka.common.resource.ResourceType`` / ``PatternType``;
TWO_PHASE_COMMIT is 15 as Kafka 4.x numbers it, KIP-939). An ``AclBinding`` is a resource
pattern (type, name, LITERAL or PREFIXED) with an entry (principal, host, operation,
ALLOW/DENY). ``AclBindingFilter`` selects bindings for DescribeAcls / DeleteAcls (ANY
fields, the MATCH pattern type: every pattern that would apply to a named resource).

``AclAuthorizer.authorize(session, operation, resource_type, name)`` follows
``StandardAuthorizerData``:

- a principal listed in ``super.users`` is allowed everything;
- the ACLs that apply are those of the resource type whose pattern matches the name (a
  LITERAL pattern equal to it, the LITERAL wildcard ``*``, a PREFIXED pattern it starts
  with) and whose principal is the session's or ``User:*``, and whose host is ``*`` or the
  client's address;
- an operation matches itself and ALL; an ALLOW of READ, WRITE, DELETE or ALTER implies
  DESCRIBE and an ALLOW of ALTER_CONFIGS implies DESCRIBE_CONFIGS (a DENY implies nothing);
- a matching DENY wins over any ALLOW; else a matching ALLOW allows;
- else, when no ACL at all exists on the resource (any principal, any operation), the
  answer is ``allow.everyone.if.no.acl.found`` (default false); otherwise denied.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from oncelog.security.principal import KafkaPrincipal, Session

CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
AUTHORIZER_CLASS = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
# Accepted for configs written for ZooKeeper-era Kafka: the same decisions.
AUTHORIZER_CLASSES = (AUTHORIZER_CLASS, "kafka.security.authorizer.AclAuthorizer")


class AclError(ValueError):
    """A binding or filter Kafka refuses (INVALID_REQUEST with this message)."""


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


E = TypeVar("E", bound=IntEnum)

_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS,
                                       AclOperation.ALTER_CONFIGS})


def _enum(kind: type[E], code: int) -> E:
    """The member of ``kind`` with this code; UNKNOWN (0) for a code Kafka does not know."""
    try:
        return kind(code)
    except ValueError:
        return kind(0)


def parse_enum(kind: type[E], text: str) -> E:
    """``"Read"``, ``"read"``, ``"READ"``, ``"IdempotentWrite"``, ``"idempotent_write"`` ->
    the member (as kafka-acls.sh spells operations); ValueError for an unknown name."""
    wanted = text.replace("_", "").replace("-", "").upper()
    for member in kind:
        if member.name.replace("_", "") == wanted:
            return member
    raise ValueError(f"unknown {kind.__name__} {text!r}: one of "
                     f"{', '.join(m.name for m in kind if m.value > 1)}")


@dataclass(frozen=True, slots=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL

    def applies_to(self, name: str) -> bool:
        """Whether this (LITERAL or PREFIXED) pattern covers the resource ``name``."""
        if self.pattern_type == PatternType.LITERAL:
            return self.name in (name, WILDCARD)
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.name)
        return False


@dataclass(frozen=True, slots=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    @classmethod
    def of(cls, resource_type: int, name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission: int) -> AclBinding:
        return cls(
            ResourcePattern(_enum(ResourceType, resource_type), name,
                            _enum(PatternType, pattern_type)),
            AccessControlEntry(principal, host, _enum(AclOperation, operation),
                               _enum(AclPermissionType, permission)))

    def validate(self) -> None:
        """Refuse what Kafka refuses to create (AclControlManager.validateNewAcl, the
        CreateAcls handler): AclError with Kafka's message."""
        p, e = self.pattern, self.entry
        if p.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise AclError(f"Invalid resourceType {p.resource_type.name}")
        if p.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"Invalid patternType {p.pattern_type.name}")
        if e.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
            raise AclError(f"Invalid operation {e.operation.name}")
        if e.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise AclError(f"Invalid permissionType {e.permission.name}")
        if p.resource_type == ResourceType.CLUSTER and p.name != CLUSTER_NAME:
            raise AclError(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
        if not p.name:
            raise AclError("Invalid empty resource name")
        try:
            KafkaPrincipal.parse(e.principal)
        except ValueError as exc:
            raise AclError(str(exc)) from None
        if not e.host:
            raise AclError("Invalid empty host")

    def __str__(self) -> str:
        p, e = self.pattern, self.entry
        return (f"(pattern=ResourcePattern(resourceType={p.resource_type.name}, "
                f"name={p.name}, patternType={p.pattern_type.name}), "
                f"entry=(principal={e.principal}, host={e.host}, "
                f"operation={e.operation.name}, permissionType={e.permission.name}))")

    def to_json(self) -> list[str | int]:
        p, e = self.pattern, self.entry
        return [int(p.resource_type), p.name, int(p.pattern_type), e.principal, e.host,
                int(e.operation), int(e.permission)]

    @classmethod
    def from_json(cls, raw: Sequence[str | int]) -> AclBinding:
        rtype, name, ptype, principal, host, operation, permission = raw
        return cls.of(int(rtype), str(name), int(ptype), str(principal), str(host),
                      int(operation), int(permission))


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """DescribeAcls / DeleteAcls: None names match anything, ANY codes match any value;
    pattern type MATCH selects every pattern that applies to the resource ``name``."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, name: str | None, pattern_type: int,
           principal: str | None, host: str | None, operation: int,
           permission: int) -> AclBindingFilter:
        return cls(_enum(ResourceType, resource_type), name, _enum(PatternType, pattern_type),
                   principal, host, _enum(AclOperation, operation),
                   _enum(AclPermissionType, permission))

    def validate(self) -> None:
        """AclControlManager.validateFilter: no UNKNOWN element."""
        if PatternType.UNKNOWN == self.pattern_type or ResourceType.UNKNOWN == self.resource_type:
            raise AclError("Unknown patternFilter.")
        if (self.operation == AclOperation.UNKNOWN
                or self.permission == AclPermissionType.UNKNOWN):
            raise AclError("Unknown entryFilter.")

    def matches(self, binding: AclBinding) -> bool:
        p, e = binding.pattern, binding.entry
        if self.resource_type != ResourceType.ANY and self.resource_type != p.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, p.pattern_type):
            return False
        if self.name is not None:
            if self.pattern_type == PatternType.MATCH:
                if not p.applies_to(self.name):
                    return False
            elif self.name != p.name:
                return False
        return ((self.principal is None or self.principal == e.principal)
                and (self.host is None or self.host == e.host)
                and self.operation in (AclOperation.ANY, e.operation)
                and self.permission in (AclPermissionType.ANY, e.permission))


def _entry_applies(entry: AccessControlEntry, operation: AclOperation) -> bool:
    """StandardAuthorizerData.findResult's operation rule (implication only for ALLOW)."""
    if entry.operation in (AclOperation.ALL, operation):
        return True
    if entry.permission != AclPermissionType.ALLOW:
        return False
    if operation == AclOperation.DESCRIBE:
        return entry.operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return entry.operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


def parse_super_users(text: str | None) -> frozenset[str]:
    """``super.users``: principals separated by ``;`` (``User:admin;User:broker``)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


def encode_acls(bindings: Iterable[AclBinding]) -> bytes:
    return json.dumps({"version": 1, "acls": [b.to_json() for b in sorted(set(bindings))]},
                      indent=0).encode()


def decode_acls(data: bytes | None) -> frozenset[AclBinding]:
    if not data:
        return frozenset()
    return frozenset(AclBinding.from_json(raw) for raw in json.loads(data).get("acls", []))


class AclAuthorizer:
    """The authorizer over the bindings ``source()`` returns now (a store's current set:
    reading it every decision lets a cluster's changes apply without a restart)."""

    def __init__(self, source: Callable[[], frozenset[AclBinding]], *,
                 super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self._source = source
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._indexed: frozenset[AclBinding] | None = None
        self._by_type: dict[ResourceType, list[AclBinding]] = {}

    def _bindings_of(self, resource_type: ResourceType) -> list[AclBinding]:
        current = self._source()
        if current is not self._indexed:
            by_type: dict[ResourceType, list[AclBinding]] = {}
            for binding in current:
                by_type.setdefault(binding.pattern.resource_type, []).append(binding)
            self._by_type, self._indexed = by_type, current
        return self._by_type.get(resource_type, [])

    def authorize(self, session: Session, operation: AclOperation, resource_type: int,
                  name: str) -> bool:
        principal = str(session.principal)
        if principal in self.super_users:
            return True
        principals = (principal, WILDCARD_PRINCIPAL)
        found_acl, allowed = False, False
        for binding in self._bindings_of(_enum(ResourceType, resource_type)):
            if not binding.pattern.applies_to(name):
                continue
            found_acl = True
            entry = binding.entry
            if entry.principal not in principals or entry.host not in (WILDCARD,
                                                                       session.client_host):
                continue
            if not _entry_applies(entry, operation):
                continue
            if entry.permission == AclPermissionType.DENY:
                return False
            allowed = True
        if allowed:
            return True
        return not found_acl and self.allow_everyone_if_no_acl_found

    def authorize_any(self, session: Session, operation: AclOperation,
                      resource_type: int) -> bool:
        """May the session do ``operation`` on at least one resource of the type? Kafka's
        ``Authorizer.authorizeByResourceType`` (the default StandardAuthorizer keeps): a
        super user (asked as a LITERAL ``hardcode`` resource) or a wildcard ALLOW is
        enough, a wildcard DENY is final; otherwise some ALLOW pattern (of exactly this
        operation or ALL: no implied DESCRIBE) must not be covered by a DENY of the same
        literal name or of a prefix of it."""
        if self.authorize(session, operation, resource_type, "hardcode"):
            return True
        principals = (str(session.principal), WILDCARD_PRINCIPAL)
        allows: list[ResourcePattern] = []
        denied_literals: set[str] = set()
        denied_prefixes: set[str] = set()
        for binding in self._bindings_of(_enum(ResourceType, resource_type)):
            entry, pattern = binding.entry, binding.pattern
            if (entry.principal not in principals
                    or entry.host not in (WILDCARD, session.client_host)
                    or entry.operation not in (operation, AclOperation.ALL)):
                continue
            if entry.permission == AclPermissionType.DENY:
                if pattern.pattern_type == PatternType.LITERAL and pattern.name == WILDCARD:
                    return False
                (denied_literals if pattern.pattern_type == PatternType.LITERAL
                 else denied_prefixes).add(pattern.name)
            elif entry.permission == AclPermissionType.ALLOW:
                allows.append(pattern)
        if any(p.pattern_type == PatternType.LITERAL and p.name == WILDCARD for p in allows):
            return True
        for pattern in allows:
            if pattern.pattern_type == PatternType.LITERAL and pattern.name in denied_literals:
                continue
            if not any(pattern.name[:end] in denied_prefixes
                       for end in range(1, len(pattern.name) + 1)):
                return True
        return False

    def authorized_operations(self, session: Session, resource_type: int, name: str,
                              supported: Iterable[AclOperation]) -> frozenset[AclOperation]:
        """The operations of ``supported`` this session may do on the resource (the
        authorized-operations bitfields of Metadata, DescribeCluster, DescribeGroups)."""
        return frozenset(op for op in supported
                         if self.authorize(session, op, resource_type, name))
