"""The ``oncelog`` command: ``serve`` a broker; ``topics``, ``txn`` and ``metrics`` talk to one.

Admin commands take ``--bootstrap-server HOST:PORT`` (default 127.0.0.1:9092) as Kafka's
tools do; see ``oncelog.cli.txn`` and ``oncelog.cli.topics``.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":  # `python -m oncelog.cli.main`, how the harness starts brokers
    from oncelog.program import as_program

    as_program()

import argparse
import asyncio
import gc
import importlib
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import cast

from oncelog.cli.common import (
    BROKEN_PIPE_EXIT,
    OncelogParser,
    exit_quietly_on_broken_pipe,
    kafka_form,
)
from oncelog.cli.event_loop import (
    ENV_VARIABLE,
    EVENT_LOOPS,
    EventLoopUnavailable,
    loop_factory,
    requested,
)
from oncelog.config import BrokerConfig, ConfigSource, split_log_dirs

NONROUTABLE_HOSTS = frozenset({"0.0.0.0", "::"})
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    port_number = int(port)
    if not 0 <= port_number <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return host.strip("[]") or "0.0.0.0", port_number


def _log_level(text: str) -> str:
    """argparse type: a logging level name, any case."""
    name = text.strip().upper()
    if name not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {text!r}; one of {', '.join(LOG_LEVELS)}"
        )
    return name


# The talk-to-a-broker commands by name, and the module of oncelog.cli that adds and runs
# each (console adds produce and consume). A command's module is imported only when the
# command line is built for it, so that `serve` starts without them and a command without
# the others (the console's consumer, the users' etcd client).
TOOLS = {
    "topics": "topics", "cluster": "cluster", "dev-cluster": "devcluster",
    "records": "records", "configs": "configs", "txn": "txn", "metrics": "metrics",
    "produce": "console", "offsets": "offsets", "groups": "groups", "dump-log": "dumplog",
    "ui": "ui", "consume": "console", "users": "users", "verify": "verify", "acls": "acls",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` ("serve" or one of ``TOOLS``) just that
    command's (what ``main`` builds for ``oncelog COMMAND ...``, so a command imports only
    its own module)."""
    parser = OncelogParser(
        prog="oncelog",
        description="oncelog: a Kafka-compatible streaming log built for exactly-once. "
        "`oncelog serve` runs a broker; the other commands talk to one with "
        "--bootstrap-server, as Kafka's tools do.",
    )
    # Every sub-command's parser (and theirs) is an OncelogParser: --version, defaults.
    sub = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                              parser_class=OncelogParser),
    )
    serve = sub.add_parser(
        "serve", help="run a single-node broker",
        description="Run a broker in the foreground until SIGTERM or Ctrl-C. It prints "
        "'oncelog ready on HOST:PORT' once clients can connect.",
    )
    serve.add_argument("--data-dir", type=Path, default=None,
                       help="directory of the broker's files (default: the first entry of "
                            "log.dirs, ./data)")
    serve.add_argument("--listen", type=_host_port, default=None, metavar="HOST:PORT",
                       help="the PLAINTEXT listener's address, unless -c listeners=... names "
                            "the listeners (default 127.0.0.1:9092)")
    serve.add_argument("--advertised", type=_host_port, default=None, metavar="HOST:PORT",
                       help="address clients of the PLAINTEXT listener are told to connect "
                            "to (default: --listen)")
    serve.add_argument("--node-id", type=int, default=None, metavar="ID",
                       help="this broker's id, the same as -c node.id=ID (default 1)")
    serve.add_argument("--config-file", type=Path, default=None, metavar="FILE",
                       help="server.properties-style file of Kafka config names "
                            "(default: none, built-in defaults)")
    serve.add_argument("-c", dest="configs", action="append", default=[], metavar="KEY=VALUE",
                       help="a broker config, repeatable, overriding --config-file, e.g. "
                            "-c transaction.two.phase.commit.enable=true (default: none)")
    serve.add_argument("--log-level", type=_log_level, default="INFO", metavar="LEVEL",
                       help=f"one of {', '.join(LOG_LEVELS)}, any case (default INFO)")
    serve.add_argument(
        "--metrics", type=_host_port, default=None, metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)",
    )
    serve.add_argument(
        "--event-loop", choices=EVENT_LOOPS, default=None,
        help="the asyncio event loop: uvloop when installed (auto), uvloop, or the standard "
             f"library's asyncio (default: ${ENV_VARIABLE}, else auto)",
    )
    serve.add_argument(
        "--ui", type=_host_port, default=None, metavar="HOST:PORT",
        help="serve the transactions console at http://HOST:PORT/ (default: off)",
    )
    if command == "serve":
        return parser
    modules = [TOOLS[command]] if command is not None else dict.fromkeys(TOOLS.values())
    for module in modules:
        _tool_module(module).add_parser(sub)
    return parser


def _tool_module(name: str) -> ModuleType:
    return importlib.import_module(f"oncelog.cli.{name}")


def serve(args: argparse.Namespace) -> int:
    from oncelog.broker.broker import Broker
    from oncelog.broker.datadir import DataDirError
    from oncelog.cluster.metadata import MetadataStoreError

    logging.basicConfig(
        level=args.log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    pairs = list(args.configs)
    if args.node_id is not None:
        pairs.append(f"node.id={args.node_id}")
    try:
        config = BrokerConfig.from_sources(args.config_file, pairs)
    except (OSError, ValueError) as exc:
        print(f"oncelog: bad configuration: {exc}", file=sys.stderr)
        return 2
    listen = args.listen
    if listen is None and config.value_and_source("listeners")[1] is ConfigSource.DEFAULT_CONFIG:
        listen = ("127.0.0.1", 9092)
    advertised_host = (args.advertised or listen or ("", 0))[0]
    if advertised_host in NONROUTABLE_HOSTS:
        print(
            f"oncelog: bad configuration: the advertised address cannot use the nonroutable "
            f"meta-address {advertised_host}; clients could not connect to it. Use a routable "
            "address: --advertised HOST:PORT (needed when --listen is 0.0.0.0)",
            file=sys.stderr,
        )
        return 2
    try:
        loop_name, new_loop = loop_factory(requested(args.event_loop))
    except (ValueError, EventLoopUnavailable) as exc:
        print(f"oncelog: bad configuration: {exc}", file=sys.stderr)
        return 2
    data_dir = args.data_dir or Path(split_log_dirs(config["log.dirs"])[0])
    try:
        broker = Broker(
            config,
            data_dir=data_dir,
            listen=listen,
            advertised=args.advertised,
            metrics_listen=args.metrics,
            ui_listen=args.ui,
        )
    except ValueError as exc:  # listeners / TLS settings (ConfigError names the key)
        print(f"oncelog: bad configuration: {exc}", file=sys.stderr)
        return 2

    def on_ready(host: str, port: int) -> None:
        # Everything loaded so far (modules, schemas, the logs' state) lives as long as the
        # broker: keep it out of the collector's scans, which then see only request garbage.
        gc.freeze()
        print(f"oncelog ready on {host}:{port}", flush=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, broker.request_stop)
        logging.getLogger("oncelog.cli").info("event loop: %s", loop_name)
        await broker.run(on_ready)

    try:
        with asyncio.Runner(loop_factory=new_loop) as runner:
            runner.run(main())
    except (DataDirError, MetadataStoreError) as exc:
        print(f"oncelog: cannot serve: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"oncelog: cannot serve: {exc}", file=sys.stderr)
        return 1
    except BaseExceptionGroup as group:
        # From a background task, e.g. the metrics address cannot be bound.
        error = _first_os_error(group)
        if error is None:
            raise
        print(f"oncelog: cannot serve: {error}", file=sys.stderr)
        return 1
    return 0


def _first_os_error(group: BaseExceptionGroup[BaseException]) -> OSError | None:
    for exc in group.exceptions:
        if isinstance(exc, OSError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_os_error(exc)
            if found is not None:
                return found
    return None


def main(argv: list[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    # A known command's parser alone; anything else (--help, a typo) gets the whole one.
    command = words[0] if words and (words[0] == "serve" or words[0] in TOOLS) else None
    parser = build_parser(command)
    if command in TOOLS:
        module = _tool_module(TOOLS[command])
        words = kafka_form(parser, words, getattr(module, "KAFKA_ACTIONS", {}),
                           leading_options=getattr(module, "KAFKA_LEADING_OPTIONS", False))
    args = parser.parse_args(words)
    with exit_quietly_on_broken_pipe():
        if args.command == "serve":
            return serve(args)
        run: Callable[[argparse.Namespace], int] = _tool_module(TOOLS[args.command]).run
        return run(args)
    return BROKEN_PIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
