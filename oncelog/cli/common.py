"""What every admin command shares: connection options, the Admin client, tables, errors.

Commands print results on stdout and problems on stderr as one ``oncelog: ...`` line, and
exit 0 on success, 1 when the operation failed (unreachable broker, unknown id, a Kafka
error), 2 for usage errors (argparse's own exit code). No traceback reaches the user.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

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


class OncelogParser(argparse.ArgumentParser):
    """The parser of ``oncelog`` and of every sub-command: ``--version`` everywhere, each
    option's default in its help, sub-command parsers of the same class."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)
        if self.add_help:
            self.add_argument("--version", action="version",
                              version=f"oncelog {oncelog.__version__}",
                              help="print the version and exit")


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


def connection_options() -> argparse.ArgumentParser:
    """A parent parser with the options of every command that talks to a broker."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    add_bootstrap_option(group)
    group.add_argument(
        "--timeout-ms", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS",
        help=f"give up on an operation after this long (default {DEFAULT_TIMEOUT_MS})",
    )
    group.add_argument("-v", "--verbose", action="store_true", help="log client activity")
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
        level=logging.DEBUG if getattr(args, "verbose", False) else logging.CRITICAL,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return body(args)
    except CommandError as exc:
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
