"""``oncelog acls``: ACLs through CreateAcls, DescribeAcls and DeleteAcls, modelled on
``kafka-acls.sh``.

    oncelog acls add    --allow-principal User:alice [--allow-host H] [--deny-principal P]
                        [--deny-host H] --operation Read [--operation Describe ...]
                        (--topic T | --group G | --transactional-id X | --cluster) ...
                        [--resource-pattern-type literal|prefixed]
    oncelog acls remove (same options; without principals: every ACL of the resources)
                        [--force]   (else asks for confirmation on a terminal)
    oncelog acls list   [resources] [--principal P] [--resource-pattern-type any|match|...]

kafka-acls.sh's forms work too: ``--add``, ``--remove``, ``--list`` as the action, and the
``--producer [--idempotent]`` / ``--consumer`` roles (AclCommand's operations for them).
Operations are Kafka's names (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
DescribeConfigs, AlterConfigs, IdempotentWrite, TwoPhaseCommit, All; any case); hosts
default to ``*`` as in kafka-acls.sh. The broker must run with an authorizer
(``authorizer.class.name``), else it answers SECURITY_DISABLED.
"""

from __future__ import annotations

import argparse
import sys

from oncelog.cli.common import (
    CommandError,
    add_hints,
    connection_options,
    open_admin,
    print_table,
    run_command,
)
from oncelog.security.acl import (
    CLUSTER_NAME,
    WILDCARD,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    parse_enum,
)


def _options(parser: argparse.ArgumentParser, *, listing: bool) -> None:
    parser.add_argument("--topic", action="append", default=[], metavar="NAME",
                        help="a topic resource (repeatable; default none)")
    parser.add_argument("--group", action="append", default=[], metavar="NAME",
                        help="a group resource (repeatable; default none)")
    parser.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                        help="a transactional id resource (repeatable; default none)")
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument("--resource-pattern-type", default=None,
                        choices=["literal", "prefixed", "any", "match"],
                        help="default: literal (list without a resource: any)")
    if listing:
        parser.add_argument("--principal", default=None, help="only this principal's ACLs")
        return
    parser.add_argument("--allow-principal", action="append", default=[], metavar="P",
                        help="principal to allow, e.g. User:alice (repeatable; default none)")
    parser.add_argument("--deny-principal", action="append", default=[], metavar="P",
                        help="principal to deny (repeatable; default none)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="HOST",
                        help="host the allow applies to (repeatable; default *)")
    parser.add_argument("--deny-host", action="append", default=[], metavar="HOST",
                        help="host the deny applies to (repeatable; default *)")
    parser.add_argument("--operation", action="append", default=[], metavar="OP",
                        help="repeatable; default All")
    parser.add_argument("--producer", action="store_true",
                        help="the producer role: Write, Describe, Create on --topic, Write, "
                             "Describe on --transactional-id (instead of --operation)")
    parser.add_argument("--idempotent", action="store_true",
                        help="with --producer: IdempotentWrite on the cluster too")
    parser.add_argument("--consumer", action="store_true",
                        help="the consumer role: Read, Describe on --topic, Read on --group "
                             "(instead of --operation)")
    parser.add_argument("--force", action="store_true", help="remove without asking")
    add_hints(parser, {"--user-principal": "oncelog has no delegation tokens: name the "
                                           "principal with --allow-principal",
                       "--delegation-token": "oncelog has no delegation tokens",
                       "--bootstrap-controller": "oncelog brokers answer admin requests "
                                                 "themselves: --bootstrap-server HOST:PORT"})


# kafka-acls.sh's action flags: `oncelog acls --add ...` is `oncelog acls add ...`.
KAFKA_ACTIONS = {"--add": "add", "--remove": "remove", "--list": "list"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acls", help="add, remove and list ACLs")
    actions = p.add_subparsers(dest="acls_action", required=True)
    for name, text in (("add", "add ACLs"), ("remove", "remove ACLs")):
        _options(actions.add_parser(name, parents=[connection_options()], help=text),
                 listing=False)
    _options(actions.add_parser("list", parents=[connection_options()], help="list ACLs"),
             listing=True)


def run(args: argparse.Namespace) -> int:
    body = {"add": cmd_add, "remove": cmd_remove, "list": cmd_list}[args.acls_action]
    return run_command(args, body, f"acls {args.acls_action}")


def _resources(args: argparse.Namespace) -> list[tuple[ResourceType, str]]:
    found = [(ResourceType.TOPIC, t) for t in args.topic]
    found += [(ResourceType.GROUP, g) for g in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, x) for x in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.CLUSTER, CLUSTER_NAME))
    return found


def _pattern_type(args: argparse.Namespace, default: PatternType) -> PatternType:
    text = args.resource_pattern_type
    return default if text is None else PatternType[text.upper()]


def _entries(args: argparse.Namespace) -> list[AccessControlEntry]:
    try:
        operations = [parse_enum(AclOperation, op) for op in args.operation] or [
            AclOperation.ALL]
    except ValueError as exc:
        raise CommandError(str(exc), 2) from None
    entries = []
    for principals, hosts, permission in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        entries += [AccessControlEntry(p, h, op, permission) for p in principals
                    for h in hosts or [WILDCARD] for op in operations]
    return entries


def _named_resources(args: argparse.Namespace
                     ) -> tuple[list[tuple[ResourceType, str]], PatternType]:
    """The resources add / remove act on (at least one) and their pattern type."""
    resources = _resources(args)
    if not resources:
        raise CommandError("name a resource: --topic, --group, --transactional-id or "
                           "--cluster", 2)
    return resources, _pattern_type(args, PatternType.LITERAL)


def _role_operations(args: argparse.Namespace
                     ) -> dict[ResourceType, list[AclOperation]] | None:
    """The operations of kafka-acls.sh's --producer / --consumer roles by resource type
    (AclCommand's producer and consumer ACLs); None without a role."""
    if not args.producer and not args.consumer:
        if args.idempotent:
            raise CommandError("The --idempotent option is only available if --producer is "
                               "set", 2)
        return None
    if args.operation or args.deny_principal or args.deny_host:
        raise CommandError("--producer and --consumer take no --operation, --deny-principal "
                           "or --deny-host", 2)
    if args.producer and not args.topic:
        raise CommandError("With --producer you must specify a --topic", 2)
    if args.consumer and (not args.topic or not args.group or (
            not args.producer and (args.cluster or args.transactional_id))):
        raise CommandError("With --consumer you must specify a --topic and a --group and no "
                           "--cluster or --transactional-id option should be specified.", 2)
    out: dict[ResourceType, list[AclOperation]] = {}
    if args.producer:
        out[ResourceType.TOPIC] = [AclOperation.WRITE, AclOperation.DESCRIBE,
                                   AclOperation.CREATE]
        out[ResourceType.TRANSACTIONAL_ID] = [AclOperation.WRITE, AclOperation.DESCRIBE]
        if args.idempotent:
            out[ResourceType.CLUSTER] = [AclOperation.IDEMPOTENT_WRITE]
    if args.consumer:
        topic_ops = out.get(ResourceType.TOPIC, [])
        out[ResourceType.TOPIC] = topic_ops + [op for op in (
            AclOperation.READ, AclOperation.DESCRIBE) if op not in topic_ops]
        out[ResourceType.GROUP] = [AclOperation.READ]
    return out


def _role_bindings(args: argparse.Namespace, roles: dict[ResourceType, list[AclOperation]]
                   ) -> list[AclBinding]:
    resources, pattern_type = _named_resources(args)
    if ResourceType.CLUSTER in roles and not args.cluster:
        resources.append((ResourceType.CLUSTER, CLUSTER_NAME))
    bindings = []
    for rtype, name in resources:
        pattern = ResourcePattern(rtype, name, PatternType.LITERAL
                                  if rtype is ResourceType.CLUSTER else pattern_type)
        for op in roles.get(rtype, []):
            bindings += [AclBinding(pattern, AccessControlEntry(p, h, op,
                                                                AclPermissionType.ALLOW))
                         for p in args.allow_principal for h in args.allow_host or [WILDCARD]]
    return bindings


def _bindings(args: argparse.Namespace) -> list[AclBinding]:
    roles = _role_operations(args)
    if roles is not None:
        return _role_bindings(args, roles)
    resources, pattern_type = _named_resources(args)
    return [AclBinding(ResourcePattern(rtype, name, pattern_type), entry)
            for rtype, name in resources for entry in _entries(args)]


def _print(bindings: list[AclBinding]) -> None:
    print_table(["RESOURCE_TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION",
                 "PERMISSION"],
                [[b.pattern.resource_type.name, b.pattern.name, b.pattern.pattern_type.name,
                  b.entry.principal, b.entry.host, b.entry.operation.name,
                  b.entry.permission.name] for b in sorted(bindings)])


def cmd_add(args: argparse.Namespace) -> int:
    bindings = _bindings(args)
    if not bindings:
        raise CommandError("name a principal: --allow-principal or --deny-principal", 2)
    with open_admin(args) as admin:
        results = admin.create_acls(bindings)
    failed = [(b, e) for b, e in results.items() if e is not None]
    for binding, error in failed:
        print(f"oncelog: {binding}: {error}", file=sys.stderr)
    _print([b for b, e in results.items() if e is None])
    return 1 if failed else 0


def _filters(args: argparse.Namespace) -> list[AclBindingFilter]:
    roles = _role_operations(args)
    if roles is not None:
        return [AclBindingFilter(b.pattern.resource_type, b.pattern.name,
                                 b.pattern.pattern_type, b.entry.principal, b.entry.host,
                                 b.entry.operation, b.entry.permission)
                for b in _role_bindings(args, roles)]
    resources, pattern_type = _named_resources(args)
    entries = _entries(args)
    if not args.allow_principal and not args.deny_principal:  # every ACL of the resources
        return [AclBindingFilter(rtype, name, pattern_type) for rtype, name in resources]
    return [AclBindingFilter(rtype, name, pattern_type, e.principal, e.host, e.operation,
                             e.permission)
            for rtype, name in resources for e in entries]


def cmd_remove(args: argparse.Namespace) -> int:
    filters = _filters(args)
    if not args.force:
        if not sys.stdin.isatty():
            raise CommandError("removing ACLs needs --force when not asked on a terminal", 2)
        answer = input("Are you sure you want to remove these ACLs? (y/n) ")
        if answer.strip().lower() not in ("y", "yes"):
            return 1
    with open_admin(args) as admin:
        results = admin.delete_acls(filters)
    removed: list[AclBinding] = []
    failed = False
    for result in results:
        if isinstance(result, list):
            removed += result
        else:
            print(f"oncelog: {result}", file=sys.stderr)
            failed = True
    _print(removed)
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    resources = _resources(args)
    pattern_type = _pattern_type(args, PatternType.LITERAL if resources else PatternType.ANY)
    filters = [AclBindingFilter(rtype, name, pattern_type, args.principal)
               for rtype, name in resources] or [
        AclBindingFilter(pattern_type=pattern_type, principal=args.principal)]
    found: set[AclBinding] = set()
    with open_admin(args) as admin:
        for flt in filters:
            found.update(admin.describe_acls(flt))
    _print(list(found))
    return 0
