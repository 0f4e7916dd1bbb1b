"""What every admin command shares: connection options, the Admin client, tables, errors.

Commands print results on stdout and problems on stderr as one ``oncelog: ...`` line, and
exit 0 on success, 1 when the operation failed (unreachable broker, unknown id, a Kafka
error), 2 for usage errors (argparse's own exit code). No traceback reaches the user.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

import oncelog
from oncelog.client.errors import KafkaClientError
from oncelog.config import parse_properties

if TYPE_CHECKING:  # the Admin client is imported when a command opens one: not by `serve`
    from oncelog.client import Admin

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_MS = 30000
CONNECT_TIMEOUT_MS = 5000

# What a shell reports for a process killed by SIGPIPE (128 + 13): `oncelog consume | head`.
BROKEN_PIPE_EXIT = 141

log = logging.getLogger("oncelog.cli")


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default: ``(default X)`` unless the text already
    says what the default is."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "default" in text or action.default is argparse.SUPPRESS:
            return text
        if not action.option_strings or action.nargs == 0 or action.default is None:
            return text
        if isinstance(action.default, list) and not action.default:
            return text
        return f"{text} (default %(default)s)" if text else "(default %(default)s)"


KAFKA_TOOLS_DOC = "docs/kafka-tools.md"


class OncelogParser(argparse.ArgumentParser):
    """The parser of ``oncelog`` and of every sub-command: ``--version`` everywhere, each
    option's default in its help, sub-command parsers of the same class.

    A usage error is reported by the innermost command's parser (``oncelog topics create``,
    not ``oncelog``): its usage, the error, and a hint naming the right form of a flag it
    does not take (``hints``: Kafka flags a command handles elsewhere, by flag; else a
    sibling command that takes the flag, or a close spelling)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        # Whole option names only: a Kafka flag oncelog lacks (--formatter) must be refused
        # with a hint, not taken for one it prefixes (--formatter-config).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.register("action", "parsers", CommandParsers)
        self.hints: dict[str, str] = {}
        self.siblings: CommandParsers | None = None
        if self.add_help:
            self.add_argument("--version", action="version",
                              version=f"oncelog {oncelog.__version__}",
                              help="print the version and exit")

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        text = f"{self.prog}: error: {message}\n"
        hint = self.hint(message)
        if hint:
            text += f"{self.prog}: hint: {hint}\n"
        self.exit(2, text)

    def hint(self, message: str) -> str:
        """What to type instead, for an error naming an option this parser refused."""
        if not message.startswith("unrecognized arguments:"):
            return ""
        words = message.split(":", 1)[1].split()
        flag = next((w.split("=", 1)[0] for w in words if w.startswith("-")), None)
        if flag is None:
            return f"`{self.prog} --help` shows what it takes"
        if flag in self.hints:
            return self.hints[flag]
        if self.siblings is not None:
            owners: dict[int, str] = {}  # a command's first name, not its aliases
            for name, parser in self.siblings.choices.items():
                if parser is not self and flag in parser._option_string_actions:
                    owners.setdefault(id(parser), name)
            if owners:
                parent = self.prog.rsplit(" ", 1)[0]
                return f"{flag} belongs to " + " or ".join(
                    f"`{parent} {name}`" for name in owners.values())
        close = difflib.get_close_matches(flag, list(self._option_string_actions), n=1)
        if close:
            return f"did you mean {close[0]}?"
        return (f"`{self.prog} --help` lists its options; {KAFKA_TOOLS_DOC} maps Kafka's "
                "tools and flags to oncelog's")


if TYPE_CHECKING:
    _SubParsers = argparse._SubParsersAction[argparse.ArgumentParser]
else:
    _SubParsers = argparse._SubParsersAction


class CommandParsers(_SubParsers):
    """Sub-commands whose parser reports its own errors: an option the chosen command does
    not take is refused there, with that command's usage (argparse's own action hands it
    up to the top-level parser, whose usage says nothing about the command)."""

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser = super().add_parser(name, **kwargs)
        if isinstance(parser, OncelogParser):
            parser.siblings = self
        return parser

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        super().__call__(parser, namespace, values, option_string)
        # The innermost command's parser, for usage errors its handler finds (run_command).
        vars(namespace).setdefault("command_parser", self._name_parser_map[values[0]])
        extras = getattr(namespace, argparse._UNRECOGNIZED_ARGS_ATTR, None)
        if extras:
            delattr(namespace, argparse._UNRECOGNIZED_ARGS_ATTR)
            self._name_parser_map[values[0]].error(
                "unrecognized arguments: " + " ".join(extras))


def add_hints(parser: argparse.ArgumentParser, hints: Mapping[str, str]) -> None:
    """Hints for flags ``parser`` refuses (a Kafka flag another command handles, ...)."""
    if isinstance(parser, OncelogParser):
        parser.hints.update(hints)


def command_parsers(parser: argparse.ArgumentParser) -> CommandParsers | None:
    """The sub-commands of ``parser`` (None if it has none)."""
    return next((action for action in parser._actions if isinstance(action, CommandParsers)),
                None)


def kafka_form(parser: argparse.ArgumentParser, words: Sequence[str],
               actions: Mapping[str, str], *, leading_options: bool = False) -> list[str]:
    """``oncelog COMMAND ...`` as its sub-command parser reads it, from the form of the Kafka
    tool it mirrors: kafka-topics.sh's ``--create --topic X`` is ``create --topic X`` (one
    action flag of ``actions`` names the sub-command), and with ``leading_options``
    kafka-transactions.sh's ``--bootstrap-server B describe ...`` is ``describe
    --bootstrap-server B ...``. ``words`` start with COMMAND; oncelog's own form (the
    sub-command first) is returned as it is."""
    commands = command_parsers(parser)
    command = commands.choices.get(words[0]) if commands is not None else None
    names = command_parsers(command) if command is not None else None
    if command is None or names is None:
        return list(words)
    rest = list(words[1:])
    if rest and rest[0] in names.choices:
        return list(words)
    found = list(dict.fromkeys(word for word in rest if word in actions))
    if len(found) > 1:
        command.error(f"give one action, not {' and '.join(found)}: the actions are "
                      f"{', '.join(actions)}")
    if found:
        rest.remove(found[0])
        return [words[0], actions[found[0]], *rest]
    if leading_options:
        at = next((i for i, word in enumerate(rest) if word in names.choices), None)
        if at:
            return [words[0], rest[at], *rest[:at], *rest[at + 1:]]
    return list(words)


@contextmanager
def exit_quietly_on_broken_pipe() -> Iterator[None]:
    """A reader that went away (``oncelog consume | head -1``) ends the command quietly: no
    traceback, no second error when Python flushes stdout at exit."""
    try:
        yield
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class CommandError(Exception):
    """A failure to report as one line on stderr, exiting with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def bootstrap_servers(text: str) -> str:
    """argparse type: comma-separated HOST:PORT entries."""
    for entry in text.split(","):
        host, sep, port = entry.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...], got {text!r}")
    return text


def add_bootstrap_option(group: argparse._ActionsContainer) -> None:
    group.add_argument(
        "--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
        type=bootstrap_servers,
        help=f"broker(s) to connect to, comma-separated (default {DEFAULT_BOOTSTRAP})",
    )
    group.add_argument(
        "--command-config", type=Path, default=None, metavar="FILE",
        help="properties file of client configs, as Kafka's tools take, e.g. "
             "security.protocol=SSL and ssl.truststore.location=ca.pem (default: none)",
    )


def command_configs(args: argparse.Namespace) -> dict[str, object]:
    """The client configs of ``--command-config FILE`` (none without it); CommandError
    (exit 2) if the file cannot be read."""
    path = getattr(args, "command_config", None)
    if path is None:
        return {}
    try:
        return dict(parse_properties(path.read_text()))
    except OSError as exc:
        raise CommandError(f"cannot read --command-config {path}: {exc.strerror}", 2) from None


def connection_options(verbose_flags: Sequence[str] = ("-v", "--verbose")
                       ) -> argparse.ArgumentParser:
    """A parent parser with the options of every command that talks to a broker
    (``verbose_flags``: those that log the client's activity, less any the Kafka tool a
    command mirrors gives another meaning)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    add_bootstrap_option(group)
    group.add_argument(
        "--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
        help=f"give up on an operation after this long (default {DEFAULT_TIMEOUT_MS})",
    )
    group.add_argument(*verbose_flags, dest="log_client", action="store_true",
                       help="log client activity")
    return parent


def admin_config(args: argparse.Namespace) -> dict[str, object]:
    timeout = max(1, int(args.timeout_ms))
    return {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "oncelog-cli",
        "default.api.timeout.ms": timeout,
        "request.timeout.ms": timeout,
        "max.block.ms": timeout,
        "socket.connection.setup.timeout.ms": min(timeout, CONNECT_TIMEOUT_MS),
        # Looking a topic up must never create it.
        "allow.auto.create.topics": False,
        **command_configs(args),
    }


@contextmanager
def open_admin(args: argparse.Namespace) -> Iterator[Admin]:
    """An Admin whose broker has answered a metadata request (so an unreachable broker is
    reported at once rather than after the retries of the first real request)."""
    from oncelog.client import Admin

    try:
        admin = Admin(admin_config(args))
    except KafkaClientError as exc:  # e.g. a malformed --bootstrap-server
        raise CommandError(f"bad connection options: {exc}", 2) from None
    try:
        try:
            admin.describe_cluster()
        except KafkaClientError as exc:
            raise CommandError(f"cannot reach {args.bootstrap_server}: {exc}") from None
        yield admin
    finally:
        admin.close()


def run_command(
    args: argparse.Namespace, body: Callable[[argparse.Namespace], int], what: str
) -> int:
    """Run ``body``, turning every failure into one line on stderr and an exit code."""
    logging.basicConfig(
        level=logging.DEBUG if getattr(args, "log_client", False) else logging.CRITICAL,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return body(args)
    except CommandError as exc:
        parser = getattr(args, "command_parser", None)
        if exc.exit_code == 2 and parser is not None:  # a usage error: with the usage
            parser.print_usage(sys.stderr)
        print(f"oncelog: {exc}", file=sys.stderr)
        return exc.exit_code
    except KafkaClientError as exc:
        print(f"oncelog: {what} failed: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        raise  # the reader of stdout went away: main() ends quietly
    except OSError as exc:
        print(f"oncelog: {what} failed: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("oncelog: interrupted", file=sys.stderr)
        return 130


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], out: TextIO | None = None
) -> None:
    """Columns padded to their widest cell, separated by two spaces (header line first)."""
    stream = out if out is not None else sys.stdout
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    for row in [list(headers), *cells]:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(),
              file=stream)


def node_ids(nodes: tuple[int, ...]) -> str:
    """Node ids as kafka-topics.sh prints them: comma-separated ("-" for none)."""
    return ",".join(map(str, nodes)) or "-"
