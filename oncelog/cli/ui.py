"""``oncelog ui``: the transactions console against any Kafka-compatible broker.

Serves the page of ``oncelog.ui`` at ``--listen HOST:PORT`` (default 127.0.0.1:8080) and
reads everything it shows with the Kafka protocol from ``--bootstrap-server``; runs until
interrupted. ``oncelog serve --ui HOST:PORT`` runs the same console inside the broker.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from oncelog.cli.common import bootstrap_servers, connection_options

DEFAULT_LISTEN = ("127.0.0.1", 8080)
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15


def _listen_address(text: str) -> tuple[str, int]:
    """argparse type: one HOST:PORT (the console's own address)."""
    if "," in text:
        raise argparse.ArgumentTypeError(f"expected one HOST:PORT, got {text!r}")
    host, _, port = bootstrap_servers(text).strip().rpartition(":")
    return host.strip("[]"), int(port)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ui", parents=[connection_options()], help="serve the transactions console",
        description="Serve the transactions console (a web page: topics' HW and LSO, open, "
                    "prepared and hanging transactions, groups' lag; abort / force-terminate) "
                    "for the broker(s) at --bootstrap-server.",
    )
    p.add_argument("--listen", type=_listen_address, default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help="where to serve the page (default "
                        f"{DEFAULT_LISTEN[0]}:{DEFAULT_LISTEN[1]})")
    p.add_argument("--max-transaction-timeout", type=int, metavar="MINUTES",
                   default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                   help="a transaction idle longer than this may be hanging (default "
                        f"{DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN}, i.e. transaction.max.timeout.ms)")


def run(args: argparse.Namespace) -> int:
    from oncelog.ui.server import Console, bind_console, console_url, serve_console

    logging.basicConfig(
        level=logging.DEBUG if args.log_client else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr,
    )
    console = Console(args.bootstrap_server,
                      max_timeout_ms=max(0, args.max_transaction_timeout) * 60_000,
                      timeout_ms=args.timeout_ms)

    async def main() -> None:
        host, port = args.listen
        server = await bind_console(host, port, console)
        print(f"oncelog console on {console_url(server)}", flush=True)
        await serve_console(server, console)

    try:
        asyncio.run(main())
    except OSError as exc:
        print(f"oncelog: cannot serve the console on {args.listen[0]}:{args.listen[1]}: {exc}",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0
