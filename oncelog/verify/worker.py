"""The verify client worker: ``python -m oncelog.verify.worker setup|work|final``.

``work`` is one worker process of the workload (issue15-common.md): a transactional
producer and a read_committed group consumer doing consume-transform-produce transactions
until SIGTERM. Per transaction it writes an ``invoke`` line once it knows what it will send
(before the first send) and an ``op`` line when the transaction has ended, each flushed, to
``--out``. Errors are handled as an exactly-once application must: abortable or retriable →
abort (recreate the producer if the abort fails), seek the consumer back to the group's
committed offsets, new poll session; a failed commit → outcome unknown, recreate the
producer; fenced or fatal → write the op and exit 3 (the runner starts the slot again).
A watchdog ends the process (exit 4) if a transaction makes no progress for
``WATCHDOG_S``: whatever a client does, a worker never hangs.

``setup`` creates the two topics; ``final`` is the final read (``oncelog.verify.readback``).
"""

from __future__ import annotations

if __name__ == "__main__":
    from oncelog.program import as_program

    as_program()

import argparse
import faulthandler
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from oncelog.verify.clients import (
    CLIENTS,
    ClientError,
    ClientSettings,
    Delivery,
    TxnClient,
    command_configs,
)
from oncelog.verify.clients.factory import make_client
from oncelog.verify.history import (
    FAIL,
    OK,
    UNKNOWN,
    Op,
    Poll,
    Send,
    invoke_line,
    op_line,
    split_tp,
    tp_key,
)

log = logging.getLogger("oncelog.verify.worker")

POLL_RECORDS = 20
POLL_TIMEOUT_S = 0.2
WATCHDOG_S = 45.0  # longer than any one transaction's bounded calls
RECOVER_DEADLINE_S = 60.0
EXIT_FATAL = 3
EXIT_STUCK = 4
EXIT_UNRECOVERABLE = 5


class Stuck(Exception):
    """Recovery (re-initialising the producer, seeking back) failed until its deadline."""


class TxnLoop:
    """The worker's state across transactions; ``run_one`` is one transaction."""

    def __init__(self, args: argparse.Namespace, client: TxnClient, out: TextIO,
                 stop: threading.Event, clock: Callable[[], float]) -> None:
        self.args = args
        self.client = client
        self.out = out
        self.stop = stop
        self.clock = clock
        self.rng = random.Random(f"{args.seed}/{args.process}")
        self.seq = 0
        self.session = 0
        self.producer_session = 0
        self.generation = client.generation()
        self.progress = time.monotonic()

    def write(self, line: str) -> None:
        self.out.write(line + "\n")
        self.out.flush()

    def plan(self, op: Op, polled: list[tuple[str, int, int, str]]) -> None:
        """Fresh values to random partitions of both topics, then one derived record per
        polled record (same partition number of the output topic)."""
        topics = (self.args.input, self.args.output)
        for i in range(self.rng.randint(1, 4)):
            tp = tp_key(self.rng.choice(topics), self.rng.randrange(self.args.partitions))
            op.sends.append(Send(tp, f"{op.process}.{op.seq}.{i}"))
        for _, partition, _, value in polled:
            op.sends.append(Send(tp_key(self.args.output, partition), f"x:{value}",
                                 source=value))

    def run_one(self) -> bool:
        """One transaction; False when the worker must exit (fatal error)."""
        self.seq += 1
        self.progress = time.monotonic()
        op = Op(self.args.process, self.args.client, self.seq, self.clock(),
                group=self.args.group, producer_session=self.producer_session)
        deliveries: list[Delivery] = []
        committing = False
        try:
            self.client.begin()
            records = self.client.poll(POLL_RECORDS, POLL_TIMEOUT_S)
            generation = self.client.generation()
            if generation != self.generation:  # a rebalance: positions moved
                self.generation = generation
                self.session += 1
            polled = [(r.topic, r.partition, r.offset, r.value) for r in records]
            reads: dict[str, list[tuple[int, str]]] = {}
            positions: dict[tuple[str, int], int] = {}
            for topic, partition, offset, value in polled:
                reads.setdefault(tp_key(topic, partition), []).append((offset, value))
                positions[(topic, partition)] = max(positions.get((topic, partition), 0),
                                                    offset + 1)
            if polled:
                op.polls.append(Poll(reads, self.session))
            op.offsets = {tp_key(t, p): o for (t, p), o in positions.items()}
            self.plan(op, polled)
            self.write(invoke_line(op))
            for send in op.sends:
                deliveries.append(self.client.send(*split_tp(send.tp), send.value))
            if positions:
                self.client.send_offsets(positions)
            self.client.flush(self.args.call_timeout_s)
            self._fill_offsets(op, deliveries, 1.0)
            if self.stop.is_set() or self.rng.random() < self.args.abort_ratio:
                self.client.abort()
                op.outcome = FAIL
            else:
                committing = True
                self.client.commit()
                op.outcome = OK
        except ClientError as exc:
            op.error = str(exc)
            op.outcome = UNKNOWN if committing else FAIL
            self._fill_offsets(op, deliveries, 0.0)
            op.complete = self.clock()
            self.write(op_line(op))
            log.info("process %s txn %s failed (%s): %s", op.process, op.seq, op.outcome, exc)
            if exc.kind == "fatal":
                return False
            self._recover(abort=not committing)
            return True
        op.complete = self.clock()
        self.write(op_line(op))
        if op.outcome == FAIL:
            self._seek_back()
        return True

    @staticmethod
    def _fill_offsets(op: Op, deliveries: list[Delivery], timeout: float) -> None:
        for send, delivery in zip(op.sends, deliveries, strict=False):
            if send.offset is None:
                send.offset = delivery.offset(timeout)

    def _recover(self, abort: bool) -> None:
        """After a failed transaction: abort it (or, when that fails or the commit failed,
        a new producer: InitProducerId ends whatever was open), then seek back."""
        if abort:
            try:
                self.client.abort()
            except ClientError as exc:
                log.info("process %s abort failed, new producer: %s", self.args.process, exc)
                self._reinit()
        else:
            self._reinit()
        self._seek_back()

    def _retry(self, what: str, call: Callable[[], None]) -> None:
        deadline = time.monotonic() + RECOVER_DEADLINE_S
        while True:
            self.progress = time.monotonic()
            try:
                call()
                return
            except ClientError as exc:
                if exc.kind == "fatal" or time.monotonic() > deadline:
                    raise Stuck(f"{what}: {exc}") from exc
                log.info("process %s %s failed, retrying: %s", self.args.process, what, exc)
                time.sleep(0.5)  # retry backoff against a broker that is down

    def _reinit(self) -> None:
        self.producer_session += 1
        self._retry("init_transactions", self.client.init)

    def _seek_back(self) -> None:
        self.session += 1
        self._retry("seek to committed", self.client.seek_to_committed)


def _watchdog(loop: TxnLoop, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if time.monotonic() - loop.progress > WATCHDOG_S:
            log.error("process %s made no progress for %ss; exiting", loop.args.process,
                      WATCHDOG_S)
            faulthandler.dump_traceback(all_threads=True)  # where it hangs, into its log
            os._exit(EXIT_STUCK)


def work(args: argparse.Namespace) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: where is it?
    settings = ClientSettings(args.bootstrap, args.group, args.input, args.transactional_id,
                              args.transaction_timeout_ms, args.call_timeout_s,
                              command_configs(args.command_config))
    client = make_client(args.client, settings)
    with open(args.out, "a") as out:
        loop = TxnLoop(args, client, out, stop, lambda: time.time() - args.started_at)
        threading.Thread(target=_watchdog, args=(loop, stop), daemon=True).start()
        try:
            loop._retry("init_transactions", client.init)
            while not stop.is_set():
                if not loop.run_one():
                    return EXIT_FATAL
        except Stuck as exc:
            log.error("process %s gives up: %s", args.process, exc)
            return EXIT_UNRECOVERABLE
        finally:
            stop.set()
            client.close()
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--command-config", type=Path, default=None,
                   help="properties file of client configs (security.protocol, sasl.*, ssl.*)")
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--partitions", type=int, required=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m oncelog.verify.worker")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("setup", help="create the input and output topics")
    _common(p)
    p.add_argument("--replication-factor", type=int, default=1)
    p.add_argument("--min-insync-replicas", type=int, default=None)
    p = sub.add_parser("work", help="run transactions until SIGTERM")
    _common(p)
    p.add_argument("--client", choices=CLIENTS, required=True)
    p.add_argument("--process", type=int, required=True)
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--transactional-id", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--started-at", type=float, required=True)
    p.add_argument("--abort-ratio", type=float, default=0.1)
    p.add_argument("--transaction-timeout-ms", type=int, default=10000)
    p.add_argument("--call-timeout-s", type=float, default=10.0)
    p = sub.add_parser("final", help="read both topics to their end, read_committed")
    _common(p)
    p.add_argument("--group", required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--started-at", type=float, required=True)
    p.add_argument("--deadline-s", type=float, default=90.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "work":
        return work(args)
    from oncelog.verify import readback
    if args.command == "setup":
        return readback.setup(args)
    return readback.final(args)


if __name__ == "__main__":
    sys.exit(main())
