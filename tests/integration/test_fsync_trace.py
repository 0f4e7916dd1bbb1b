"""With ``log.flush.interval.messages=1`` every file recovery trusts is fsynced before the
produce that wrote it is acknowledged.

The broker runs under ``strace -f -y`` (every syscall on a file descriptor is printed with the
file's path). The test produces idempotent and transactional records (one commit, one abort)
with confluent-kafka, one at a time, waiting for each acknowledgement, then kills the broker
with SIGKILL and reads the trace:

- every write, pwrite or ftruncate to a trusted file (segment ``.log``/``.index``/
  ``.timeindex``/``.txnindex``, producer snapshots, ``log.checkpoint``, ``topics.json``,
  ``meta.properties``, the producer-id block, and so the ``__transaction_state`` and
  ``__consumer_offsets`` segments too) is followed by an fsync of that file before the next
  response the broker writes to a client socket (a produce is answered only after its data
  is durable), and in any case before the kill;
- every rename of a trusted file is followed by an fsync of its directory.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from oncelog.harness.broker import BrokerProcess, default_argv_prefix

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace"),
]

STRACE = [
    "strace", "-f", "-qq", "-y", "-s", "0",
    "-e", "trace=fsync,fdatasync,write,pwrite64,pwritev,writev,ftruncate,rename,renameat,"
    "renameat2,sendto,sendmsg",
]

# `PID syscall(FD</path>, ...` possibly split into "<unfinished ...>" and "<... resumed>".
_LINE = re.compile(r"^(?P<pid>\d+) +(?P<call>\w+)\((?P<args>.*)$")
_RESUMED = re.compile(r"^(?P<pid>\d+) +<\.\.\. (?P<call>\w+) resumed>(?P<rest>.*)$")
_FD_PATH = re.compile(r"^\d+<(?P<path>[^>]*)>")
_RENAME_TARGET = re.compile(r'"(?P<src>[^"]*)", (?:\d+<[^>]*>, )?"(?P<dst>[^"]*)"')

WRITES = {"write", "pwrite64", "pwritev", "writev", "ftruncate"}
SENDS = {"write", "writev", "sendto", "sendmsg"}
SYNCS = {"fsync", "fdatasync"}


@dataclass(frozen=True)
class Event:
    index: int  # position in the trace (the completion line for split calls)
    pid: int
    call: str
    path: str  # the fd's path, or the rename target


def trusted(path: str, data_dir: Path) -> bool:
    if not path.startswith(str(data_dir)) or path.endswith(".tmp"):
        return False
    name = Path(path).name
    return (
        name.endswith((".log", ".index", ".timeindex", ".txnindex", ".snapshot"))
        and not name.endswith("-oncelog.log")
    ) or name in ("log.checkpoint", "topics.json", "meta.properties") or "producer" in name


def parse_trace(text: str, data_dir: Path) -> list[Event]:
    events: list[Event] = []
    pending: dict[tuple[int, str], str] = {}
    for index, line in enumerate(text.splitlines()):
        resumed = _RESUMED.match(line)
        if resumed:
            pid, call = int(resumed["pid"]), resumed["call"]
            args = pending.pop((pid, call), "")
            rest = resumed["rest"]
        else:
            match = _LINE.match(line)
            if match is None:
                continue
            pid, call, args = int(match["pid"]), match["call"], match["args"]
            if args.endswith("<unfinished ...>"):
                pending[(pid, call)] = args
                if call in SYNCS:  # an fsync counts from its start
                    path = _path(call, args)
                    if path is not None:
                        events.append(Event(index, pid, call, path))
                continue
            rest = args
        if re.search(r"= -1 E", rest):
            continue
        path = _path(call, args)
        if path is not None and not (call in SYNCS and resumed):
            events.append(Event(index, pid, call, path))
    return events


def _path(call: str, args: str) -> str | None:
    if call.startswith("rename"):
        match = _RENAME_TARGET.search(args)
        return match["dst"] if match else None
    match = _FD_PATH.match(args)
    return match["path"] if match else None


def durability_violations(events: list[Event], data_dir: Path) -> list[str]:
    """Trusted-file writes not fsynced before the next client response (or at all), and
    renames not followed by a directory fsync."""
    problems: list[str] = []
    sends = [e.index for e in events if e.call in SENDS and e.path.startswith(("socket:", "TCP"))]

    def synced_between(path: str, start: int, end: float) -> bool:
        return any(e.call in SYNCS and e.path == path and start < e.index < end for e in events)

    for event in events:
        if event.call.startswith("rename") and trusted(event.path, data_dir):
            directory = str(Path(event.path).parent)
            if not synced_between(directory, event.index, float("inf")):
                problems.append(f"rename to {event.path} (trace line {event.index + 1}) is "
                                "never followed by an fsync of its directory")
        if event.call not in WRITES or not trusted(event.path, data_dir):
            continue
        next_send = next((s for s in sends if s > event.index), float("inf"))
        if not synced_between(event.path, event.index, next_send):
            when = "at all" if next_send == float("inf") else f"before trace line {next_send + 1}"
            problems.append(f"{event.call} to {event.path} (trace line {event.index + 1}) is not "
                            f"fsynced {when}")
    return problems


def produce_one_by_one(producer: Producer, topic: str, values: list[bytes]) -> None:
    acked: list[Any] = []
    on_delivery: Callable[[Any, Any], None] = lambda err, msg: acked.append((err, msg))  # noqa: E731
    for value in values:
        producer.produce(topic, value=value, on_delivery=on_delivery)
        assert producer.flush(30) == 0
    assert [err for err, _msg in acked] == [None] * len(values)


def test_trusted_files_are_fsynced_before_the_ack(
    broker_factory: Callable[..., BrokerProcess], tmp_path: Path
) -> None:
    trace = tmp_path / "strace.txt"
    broker = broker_factory(
        argv_prefix=[*STRACE, "-o", str(trace), "--", *default_argv_prefix()],
        wrapped=True,
        configs={
            "log.flush.interval.messages": 1,
            "num.partitions": 1,
            "transaction.state.log.num.partitions": 1,
            "offsets.topic.num.partitions": 1,
        },
        start_timeout=90.0,
    )
    common = {"bootstrap.servers": broker.bootstrap, "linger.ms": 0}
    idempotent = Producer({**common, "enable.idempotence": True})
    produce_one_by_one(idempotent, "plain", [b"i0", b"i1", b"i2"])
    idempotent.flush(10)
    transactional = Producer({**common, "transactional.id": "fsync-trace"})
    transactional.init_transactions(30)
    transactional.begin_transaction()
    produce_one_by_one(transactional, "txn", [b"c0", b"c1"])
    transactional.commit_transaction(30)
    transactional.begin_transaction()
    produce_one_by_one(transactional, "txn", [b"a0"])
    transactional.abort_transaction(30)
    transactional.begin_transaction()
    produce_one_by_one(transactional, "txn", [b"c2"])
    transactional.commit_transaction(30)
    broker.kill()  # every acknowledgement above came before this
    events = parse_trace(trace.read_text(), broker.data_dir)
    written = {e.path for e in events if e.call in WRITES and trusted(e.path, broker.data_dir)}
    assert any(p.endswith(".txnindex") for p in written), "the abort wrote no .txnindex"
    assert any("__transaction_state" in p for p in written)
    assert any(p.endswith(".log") and "/txn-0/" in p for p in written)
    assert durability_violations(events, broker.data_dir) == []
