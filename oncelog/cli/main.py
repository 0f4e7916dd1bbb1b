"""The ``oncelog`` command: ``serve`` a broker; ``topics``, ``txn`` and ``metrics`` talk to one.

Admin commands take ``--bootstrap-server HOST:PORT`` (default 127.0.0.1:9092) as Kafka's
tools do; see ``oncelog.cli.txn`` and ``oncelog.cli.topics``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from oncelog.config import BrokerConfig, split_log_dirs

NONROUTABLE_HOSTS = frozenset({"0.0.0.0", "::"})


def _host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    port_number = int(port)
    if not 0 <= port_number <= 65535:
        raise argparse.ArgumentTypeError(f"port out of range in {text!r}")
    return host.strip("[]") or "0.0.0.0", port_number


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oncelog", description="A Kafka-compatible log.")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run a single-node broker")
    serve.add_argument("--data-dir", type=Path, default=None, help="default ./data")
    serve.add_argument("--listen", type=_host_port, default=("127.0.0.1", 9092))
    serve.add_argument("--advertised", type=_host_port, default=None)
    serve.add_argument("--node-id", type=int, default=None)
    serve.add_argument("--config-file", type=Path, default=None)
    serve.add_argument("-c", dest="configs", action="append", default=[], metavar="KEY=VALUE")
    serve.add_argument("--log-level", default="INFO")
    serve.add_argument(
        "--metrics", type=_host_port, default=None, metavar="HOST:PORT",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (default: off)",
    )
    serve.add_argument(
        "--ui", type=_host_port, default=None, metavar="HOST:PORT",
        help="serve the transactions console at http://HOST:PORT/ (default: off)",
    )
    from oncelog.cli import configs, metrics, records, topics, txn

    topics.add_parser(sub)
    records.add_parser(sub)
    configs.add_parser(sub)
    txn.add_parser(sub)
    metrics.add_parser(sub)
    from oncelog.cli import ui

    ui.add_parser(sub)
    return parser


def serve(args: argparse.Namespace) -> int:
    from oncelog.broker.broker import Broker
    from oncelog.broker.datadir import DataDirError

    logging.basicConfig(
        level=args.log_level.upper(),
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
    advertised_host = (args.advertised or args.listen)[0]
    if advertised_host in NONROUTABLE_HOSTS:
        print(
            f"oncelog: bad configuration: the advertised address cannot use the nonroutable "
            f"meta-address {advertised_host}; clients could not connect to it. Use a routable "
            "address: --advertised HOST:PORT (needed when --listen is 0.0.0.0)",
            file=sys.stderr,
        )
        return 2
    data_dir = args.data_dir or Path(split_log_dirs(config["log.dirs"])[0])
    broker = Broker(
        config,
        data_dir=data_dir,
        listen=args.listen,
        advertised=args.advertised,
        metrics_listen=args.metrics,
        ui_listen=args.ui,
    )

    def on_ready(host: str, port: int) -> None:
        print(f"oncelog ready on {host}:{port}", flush=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, broker.request_stop)
        await broker.run(on_ready)

    try:
        asyncio.run(main())
    except DataDirError as exc:
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
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    from oncelog.cli import configs, metrics, records, topics, txn

    runners = {"topics": topics.run, "records": records.run, "txn": txn.run,
               "metrics": metrics.run, "configs": configs.run}
    from oncelog.cli import ui

    runners["ui"] = ui.run
    return runners[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
