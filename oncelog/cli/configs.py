"""``oncelog configs``: describe and change topic and broker configs (a small kafka-configs.sh).

    oncelog configs --entity-type topics --entity-name T --describe [--all]
    oncelog configs --entity-type brokers --entity-name 1 --alter --add-config k=v,k2=[a,b]
    oncelog configs --entity-type brokers --entity-default --alter --delete-config k
    oncelog configs --topic T --describe     (kafka-configs.sh's entity flags: --topic,
                                              --broker ID, --broker-defaults)

``--describe`` prints, per entity, the configs set on that entity itself (a topic's
overrides, a broker's dynamic configs, the cluster-wide broker defaults); ``--all`` prints
every config with where its value comes from. Without an entity name every topic (or every
broker and the cluster default) is described. ``--alter`` sends one IncrementalAlterConfigs:
SET for each ``--add-config`` pair (or ``--add-config-file`` line), DELETE for each
``--delete-config`` name (which must be set, as kafka-configs.sh checks). Output lines are
kafka-configs.sh's; a named topic or broker that does not exist is an error (exit 1), said
before anything is printed.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from oncelog.cli.common import (
    CommandError,
    add_hints,
    connection_options,
    open_admin,
    run_command,
)
from oncelog.client import (
    Admin,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
)
from oncelog.config import parse_properties

ENTITY_TYPES = {"topics": ConfigResourceType.TOPIC, "brokers": ConfigResourceType.BROKER}
# A comma or '=' outside square brackets (so "k=[a,b]" stays one list value).
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_KEY = re.compile(r"[a-zA-Z0-9._-]*")


NOT_HERE = ("oncelog configs handles topics and brokers (--topic, --broker, "
            "--broker-defaults, or --entity-type topics|brokers)")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("configs", parents=[connection_options()],
                       help="describe or alter topic and broker configs (kafka-configs.sh)")
    p.add_argument("--entity-type", default=None, choices=sorted(ENTITY_TYPES),
                   help="the kind of entity: topics or brokers (or use --topic, --broker, "
                        "--broker-defaults)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--entity-name", default=None,
                        help="the topic name or the broker id")
    target.add_argument("--entity-default", action="store_true",
                        help="the cluster-wide default of every broker (brokers only)")
    p.add_argument("--topic", default=None,
                   help="the topic: --entity-type topics --entity-name TOPIC")
    p.add_argument("--broker", default=None, metavar="ID",
                   help="the broker: --entity-type brokers --entity-name ID")
    p.add_argument("--broker-defaults", action="store_true",
                   help="every broker's default: --entity-type brokers --entity-default")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="list configs")
    action.add_argument("--alter", action="store_true", help="change configs")
    p.add_argument("--all", action="store_true",
                   help="with --describe: every config and its source, not only those set")
    p.add_argument("--add-config", default=None, metavar="K=V[,K=V...]",
                   help="configs to set; a list value goes in brackets: k=[a,b]")
    p.add_argument("--add-config-file", type=Path, default=None, metavar="FILE",
                   help="a properties file of configs to set (instead of --add-config)")
    p.add_argument("--delete-config", action="append", default=[], metavar="K[,K...]",
                   help="configs to remove (back to their default)")
    add_hints(p, {flag: NOT_HERE for flag in (
        "--group", "--user", "--client", "--ip", "--client-metrics", "--broker-logger",
        "--user-defaults", "--client-defaults", "--ip-defaults")})
    add_hints(p, {"--bootstrap-controller": "oncelog brokers answer admin requests "
                                            "themselves: --bootstrap-server HOST:PORT"})


def _entity(args: argparse.Namespace) -> tuple[str, str | None, bool]:
    """(entity type, entity name, entity default) from --entity-type/--entity-name/
    --entity-default or from one of kafka-configs.sh's entity flags."""
    flags = [(kind, name, default) for given, kind, name, default in (
        (args.topic is not None, "topics", args.topic, False),
        (args.broker is not None, "brokers", args.broker, False),
        (args.broker_defaults, "brokers", None, True),
    ) if given]
    if flags:
        if args.entity_type or args.entity_name is not None or args.entity_default:
            raise CommandError("--entity-{type,name,default} should not be used in "
                               "conjunction with specific entity flags", 2)
        if len(flags) > 1:
            raise CommandError("give one entity: --topic, --broker or --broker-defaults", 2)
        return flags[0]
    if args.entity_type is None:
        raise CommandError("At least one entity type must be specified: --entity-type "
                           "topics|brokers, --topic, --broker or --broker-defaults", 2)
    return args.entity_type, args.entity_name, args.entity_default


def run(args: argparse.Namespace) -> int:
    return run_command(args, cmd_configs, "configs " + ("describe" if args.describe else "alter"))


def parse_add_config(text: str) -> dict[str, str]:
    """kafka-configs.sh's ``--add-config``: ``k=v`` pairs split on commas outside brackets;
    brackets around a value are dropped (``k=[a,b]`` sets ``k`` to ``a,b``)."""
    out: dict[str, str] = {}
    for pair in re.split("," + _OUTSIDE_BRACKETS, text):
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair)
        if len(parts) != 2:
            raise CommandError('Invalid entity config: all configs to be added must be in the '
                               'format "key=val".', 2)
        name, value = parts[0].strip(), re.sub(r"[\[\]]", "", parts[1]).strip()
        if not _KEY.fullmatch(name):
            raise CommandError(f"Invalid character found for config key: {name}", 2)
        out[name] = value
    return out


def _resource(args: argparse.Namespace, name: str | None) -> ConfigResource:
    rtype = ENTITY_TYPES[args.entity_type]
    if name is None:
        return ConfigResource(rtype, "")
    if rtype == ConfigResourceType.BROKER and not name.isdigit():
        raise CommandError(f"The entity name for brokers must be a valid integer broker id, "
                           f"found: {name}", 2)
    return ConfigResource(rtype, name)


def _own_source(resource: ConfigResource) -> ConfigSource:
    """The source of the configs set on ``resource`` itself (what --describe lists)."""
    if resource.type == ConfigResourceType.TOPIC:
        return ConfigSource.DYNAMIC_TOPIC_CONFIG
    if resource.name == "":
        return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    return ConfigSource.DYNAMIC_BROKER_CONFIG


def format_entry(entry: ConfigEntry) -> str:
    synonyms = ", ".join(f"{s.source.name}:{s.name}={_text(s.value)}" for s in entry.synonyms)
    return (f"  {entry.name}={_text(entry.value)} sensitive={str(entry.is_sensitive).lower()} "
            f"synonyms={{{synonyms}}}")


def _text(value: str | None) -> str:
    return "null" if value is None else value


def _entries(admin: Admin, resource: ConfigResource, describe_all: bool,
             include_synonyms: bool) -> list[ConfigEntry]:
    configs = admin.describe_configs([resource], include_synonyms=include_synonyms)[resource]
    own = _own_source(resource)
    return [entry for name, entry in sorted(configs.items())
            if describe_all or entry.source == own]


def cmd_configs(args: argparse.Namespace) -> int:
    args.entity_type, args.entity_name, args.entity_default = _entity(args)
    if args.entity_default and args.entity_type != "brokers":
        raise CommandError("--entity-default applies to --entity-type brokers only", 2)
    if args.alter:
        if args.entity_name is None and not args.entity_default:
            raise CommandError("--entity-name or --entity-default must be specified with "
                               "--alter", 2)
        if args.add_config is not None and args.add_config_file is not None:
            raise CommandError("Only one of --add-config or --add-config-file must be "
                               "specified", 2)
        if args.add_config is None and args.add_config_file is None and not args.delete_config:
            raise CommandError("--alter needs --add-config, --add-config-file or "
                               "--delete-config", 2)
        return _alter(args)
    if args.add_config is not None or args.add_config_file is not None or args.delete_config:
        raise CommandError("--add-config, --add-config-file and --delete-config go with "
                           "--alter", 2)
    return _describe(args)


def _describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        if args.entity_name is not None or args.entity_default:
            resources = [_resource(args, args.entity_name)]
            _ensure_exists(admin, args.entity_type, args.entity_name)
        elif args.entity_type == "topics":
            resources = [_resource(args, t) for t in sorted(admin.list_topics(internal=True))]
        else:
            nodes = sorted(admin.describe_cluster().brokers)
            resources = [_resource(args, str(n)) for n in nodes] + [_resource(args, None)]
        for resource in resources:
            entries = _entries(admin, resource, args.all, include_synonyms=True)
            if resource.type == ConfigResourceType.BROKER and resource.name == "":
                print(f"Default configs for {args.entity_type} in the cluster are:")
            else:
                kind = "All" if args.all else "Dynamic"
                print(f"{kind} configs for {args.entity_type[:-1]} {resource.name} are:")
            for entry in entries:
                print(format_entry(entry))
    return 0


def _ensure_exists(admin: Admin, entity_type: str, name: str | None) -> None:
    """A named topic or broker must exist, said before anything is printed."""
    if name is None:
        return
    if entity_type == "topics":
        known = set(admin.list_topics(internal=True))
    else:
        known = {str(n) for n in admin.describe_cluster().brokers}
    if name not in known:
        raise CommandError(f"The {entity_type[:-1]} '{name}' doesn't exist and doesn't "
                           "have dynamic config.")


def _alter(args: argparse.Namespace) -> int:
    resource = _resource(args, args.entity_name)
    if args.add_config_file is not None:
        try:
            to_set = dict(parse_properties(args.add_config_file.read_text()))
        except OSError as exc:
            raise CommandError(f"cannot read --add-config-file {args.add_config_file}: "
                               f"{exc.strerror}", 2) from None
    else:
        to_set = parse_add_config(args.add_config) if args.add_config is not None else {}
    to_delete = [name.strip() for item in args.delete_config for name in item.split(",")
                 if name.strip()]
    with open_admin(args) as admin:
        current = {e.name for e in _entries(admin, resource, False, include_synonyms=False)}
        missing = [name for name in to_delete if name not in current]
        if missing:
            raise CommandError(f"Invalid config(s): {','.join(missing)}")
        ops = [AlterConfigOp(k, v, AlterConfigOpType.SET) for k, v in to_set.items()]
        ops += [AlterConfigOp(k, "", AlterConfigOpType.DELETE) for k in to_delete]
        error = admin.incremental_alter_configs({resource: ops})[resource]
        if error is not None:
            raise error
    if resource.name == "":
        print(f"Completed updating default config for {args.entity_type} in the cluster.")
    else:
        print(f"Completed updating config for {args.entity_type[:-1]} {resource.name}.")
    return 0
