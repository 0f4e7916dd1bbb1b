"""``oncelog users``: SCRAM users through DescribeUserScramCredentials and
AlterUserScramCredentials, as ``kafka-configs.sh --entity-type users`` manages them.

    oncelog users add NAME [--mechanism SCRAM-SHA-256] [--iterations 4096]
                           [--password-file FILE]   (else prompted, or one line of stdin)
    oncelog users remove NAME [--mechanism M]       (default: every mechanism it has)
    oncelog users list [NAME ...]

Each also takes ``--data-dir DIR`` (a stopped single node) or ``--metadata-etcd-endpoints
HOST:PORT`` (a cluster, before or after its brokers start) instead of a broker to ask:
the first users of a cluster whose listeners all need a SCRAM login, as Kafka's
``kafka-storage.sh format --add-scram`` (oncelog.cli.users_offline).

The password is salted and hashed here (a fresh random salt); the broker receives only the
salt and the salted password, and nothing prints it. A SASL listener needs the CLI's own
login: ``--command-config FILE`` (a properties file with ``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config`` or ``sasl.username`` / ``sasl.password``).
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from oncelog.cli import users_offline
from oncelog.cli.common import (
    CommandError,
    connection_options,
    open_admin,
    print_table,
    run_command,
)
from oncelog.client import Admin
from oncelog.client.aio.admin_scram import DEFAULT_ITERATIONS, ScramDeletion, ScramUpsertion
from oncelog.client.errors import KafkaClientError
from oncelog.security.credentials import MECHANISMS


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("users", help="add, remove and list SCRAM users")
    actions = p.add_subparsers(dest="users_action", required=True)
    add = actions.add_parser("add", parents=[connection_options()],
                             help="add a SCRAM credential (or replace its password)")
    add.add_argument("name", help="the user name (the principal is User:NAME)")
    add.add_argument("--mechanism", default="SCRAM-SHA-256", choices=sorted(MECHANISMS),
                     help="the SCRAM mechanism (default SCRAM-SHA-256)")
    add.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                     help="PBKDF2 iterations, 4096..16384 (default %(default)s)")
    add.add_argument("--password-file", type=Path, default=None,
                     help="read the password from the first line of FILE (default: prompt, "
                     "or one line of standard input when it is not a terminal)")
    users_offline.add_store_options(add)
    remove = actions.add_parser("remove", parents=[connection_options()],
                                help="remove a user's SCRAM credentials")
    remove.add_argument("name", help="the user name")
    remove.add_argument("--mechanism", default=None, choices=sorted(MECHANISMS),
                        help="only this mechanism (default: every one the user has)")
    users_offline.add_store_options(remove)
    listing = actions.add_parser("list", parents=[connection_options()],
                                 help="list users and their SCRAM mechanisms")
    listing.add_argument("names", nargs="*", help="only these users (default: all)")
    users_offline.add_store_options(listing)


def run(args: argparse.Namespace) -> int:
    body = {"add": cmd_add, "remove": cmd_remove, "list": cmd_list}[args.users_action]
    return run_command(args, body, f"users {args.users_action}")


def read_password(args: argparse.Namespace) -> str:
    if args.password_file is not None:
        lines = args.password_file.read_text().splitlines()
        password = lines[0] if lines else ""
    elif sys.stdin.isatty():
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise CommandError("the passwords do not match")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise CommandError("empty password")
    return password


def _check(results: dict[str, KafkaClientError | None]) -> None:
    for user, error in results.items():
        if error is not None:
            raise CommandError(f"user {user}: {error}")


def cmd_add(args: argparse.Namespace) -> int:
    password = read_password(args)
    if users_offline.is_offline(args):
        users_offline.add(args, password)
    else:
        with open_admin(args) as admin:
            _check(admin.alter_user_scram_credentials(
                [ScramUpsertion(args.name, args.mechanism, password, args.iterations)]))
    print(f"{args.mechanism} credential of user {args.name} set "
          f"({args.iterations} iterations)")
    return 0


def _mechanisms_of(admin: Admin, name: str) -> list[str]:
    found = admin.describe_user_scram_credentials([name]).get(name)
    if isinstance(found, KafkaClientError):
        raise CommandError(f"user {name}: {found}")
    return sorted(found or {})


def cmd_remove(args: argparse.Namespace) -> int:
    if users_offline.is_offline(args):
        mechanisms = users_offline.remove(args)
    else:
        with open_admin(args) as admin:
            mechanisms = ([args.mechanism] if args.mechanism
                          else _mechanisms_of(admin, args.name))
            for mechanism in mechanisms:  # one request each: Kafka refuses a user twice
                _check(admin.alter_user_scram_credentials(
                    [ScramDeletion(args.name, mechanism)]))
    print(f"removed {', '.join(mechanisms)} credential(s) of user {args.name}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    found: dict[str, dict[str, int] | KafkaClientError]
    if users_offline.is_offline(args):
        found = dict(users_offline.describe(args))
    else:
        with open_admin(args) as admin:
            found = admin.describe_user_scram_credentials(args.names or None)
    rows: list[list[object]] = []
    for user, infos in sorted(found.items()):
        if isinstance(infos, KafkaClientError):
            raise CommandError(f"user {user}: {infos}")
        rows += [[user, mechanism, iterations] for mechanism, iterations in sorted(infos.items())]
    print_table(["USER", "MECHANISM", "ITERATIONS"], rows)
    return 0
