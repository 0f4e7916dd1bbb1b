"""docs/kafka-tools.md, run: every row of its tables is a command line with a Kafka tool's
flags, and each runs here, through the real ``oncelog`` command, against one real
``oncelog serve`` (with an authorizer, for kafka-acls.sh's rows), and what it did is checked.
The commands are read from the document, and each has its check below keyed by its text, so
neither can change without the other. The "A wrong flag" table's command lines must be
refused by their own command: its usage, the hint the table gives, exit status 2.

One broker, one process per row (about half a second of CPU each): the tools' sections share
the broker's starting state (``setup``) but not what they change, so they run side by side,
each section's rows in the document's order."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from oncelog.client import (
    Admin,
    ConfigResource,
    ConfigResourceType,
    Consumer,
    OffsetSpec,
    Producer,
    TopicPartition,
)
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from oncelog.records.batch import HEADER_SIZE, LOG_OVERHEAD, parse_header
from oncelog.security import acl as oacl
from tests.conftest import BrokerFactory

DOC = REPO_ROOT / "docs" / "kafka-tools.md"
# The tools issue 29 names: each must have rows.
TOOLS = ("kafka-topics.sh", "kafka-console-producer.sh", "kafka-console-consumer.sh",
         "kafka-consumer-groups.sh", "kafka-configs.sh", "kafka-dump-log.sh",
         "kafka-transactions.sh", "kafka-delete-records.sh", "kafka-acls.sh")
WRONG_FLAG = "A wrong flag"
WORKERS = 3


@dataclass(frozen=True)
class Row:
    section: str  # the tool ("kafka-topics.sh"), or WRONG_FLAG
    command: str  # the command line, as the document writes it
    hint: str = ""  # WRONG_FLAG rows: what the hint says


def _cell(text: str) -> str:
    """A table cell's code: ```` `` a `b` `` ```` or `` `a` ``."""
    text = text.strip()
    if text.startswith("`` ") and text.endswith(" ``"):
        return text[3:-3]
    return text.strip("`")


def doc_rows() -> list[Row]:
    rows = []
    section = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].split(":")[0].strip()
            continue
        cells = [cell for cell in line.split(" | ")]
        if not line.startswith("| `") or not cells:
            continue
        cells[0], cells[-1] = cells[0][2:], cells[-1].removesuffix(" |")
        if section == WRONG_FLAG:
            rows.append(Row(section, _cell(cells[0]), _cell(cells[1])))
        elif _cell(cells[-1]).startswith("oncelog "):
            rows.append(Row(section, _cell(cells[-1])))
    return rows


# ------------------------------------------------------------------------------ running

@dataclass
class Run:
    """What the rows of one test share: the broker, the directory they run in."""

    broker: BrokerProcess
    cwd: Path

    def argv(self, command: str) -> tuple[list[str], str]:
        """The command's argv (``oncelog`` as ``python -m oncelog``, localhost:9092 as the
        broker) and its stdin (``< FILE``)."""
        words = shlex.split(command)
        stdin = ""
        if "<" in words:
            at = words.index("<")
            stdin = (self.cwd / words[at + 1]).read_text()
            words = words[:at]
        assert words[0] == "oncelog", command
        words = [w.replace("localhost:9092", self.broker.bootstrap) for w in words[1:]]
        return [sys.executable, "-m", "oncelog", *words], stdin

    def run(self, command: str) -> subprocess.CompletedProcess[str]:
        argv, stdin = self.argv(command)
        result = subprocess.run(argv, cwd=self.cwd, input=stdin, capture_output=True,
                                text=True, timeout=60, check=False)
        assert "Traceback" not in result.stderr, (command, result.stderr)
        return result

    def admin(self) -> Admin:
        return Admin({"bootstrap.servers": self.broker.bootstrap})


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.args, result.stdout, result.stderr)
    return result.stdout


def table(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def records(run: Run, topic: str, partition: int = 0) -> list[tuple[bytes | None, bytes | None]]:
    with Consumer({"bootstrap.servers": run.broker.bootstrap,
                   "isolation.level": "read_uncommitted"}) as consumer:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning([tp])
        end = consumer.end_offsets([tp])[tp]
        got = []
        deadline = time.monotonic() + 20
        while consumer.position(tp) < end and time.monotonic() < deadline:
            got += [(m.key, m.value) for m in consumer.poll(0.5)]
        return got


def committed(run: Run, group: str) -> dict[tuple[str, int], int]:
    with run.admin() as admin:
        return {(tp.topic, tp.partition): om.offset
                for tp, om in admin.list_consumer_group_offsets(group).items()}


def topic_config(run: Run, topic: str, name: str) -> tuple[str | None, str]:
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    with run.admin() as admin:
        entry = admin.describe_configs([resource])[resource][name]
    return entry.value, entry.source.name


def acls_of(run: Run, principal: str) -> set[tuple[str, str, str, str, str]]:
    with run.admin() as admin:
        return {(b.pattern.resource_type.name, b.pattern.name, b.pattern.pattern_type.name,
                 b.entry.operation.name, b.entry.permission.name)
                for b in admin.describe_acls() if b.entry.principal == principal}


def batch_compressions(path: Path) -> list[int]:
    data = path.read_bytes()
    out, pos = [], 0
    while len(data) - pos >= HEADER_SIZE:
        header = parse_header(data, pos)
        if header.batch_length <= 0:
            break
        out.append(header.compression)
        pos += header.batch_length + LOG_OVERHEAD
    return out


# ------------------------------------------------------------------------------ setup

FILES = {
    "client.properties": "client.id=ops\n",
    "greetings.txt": "alice:hi\nbob:hey\n",
    "reader.properties": "parse.key=true\n",
    "mixed.txt": "carol\tyo\nno-key-here\n",
    "one.txt": "one\n",
    "producer.properties": "acks=all\n",
    "formatter.properties": "print.offset=true\n",
    "consumer.properties": "client.id=reader-1\n",
    "plan.csv": "orders,0,4\n",
    "settings.properties": "segment.ms=3600000\n",
    "offsets.json": json.dumps({"partitions": [{"topic": "ledger", "partition": 0,
                                                "offset": 3}], "version": 1}),
}


@dataclass
class State:
    """What setup leaves open for the rows: the producer of an open transaction."""

    stuck: Producer


def setup(run: Run) -> State:
    """Topics orders (3 partitions: k0..k4 on 0, k5, k6 on 1), greetings, settings,
    payments (a committed transaction of `shop` at 0-1 and its marker, an open one of `stuck`
    from 3), ledger (5 records); group billing with orders-0 committed at 3."""
    for name, text in FILES.items():
        (run.cwd / name).write_text(text)
    (run.cwd / "data").symlink_to(run.broker.data_dir)
    bootstrap = {"bootstrap.servers": run.broker.bootstrap}
    with run.admin() as admin:
        admin.create_topic("orders", 3)
        for name in ("greetings", "settings", "payments", "ledger"):
            admin.create_topic(name, 1)
    with Producer(bootstrap) as producer:
        for n in range(7):
            producer.send("orders", f"v{n}".encode(), key=f"k{n}".encode(),
                          partition=0 if n < 5 else 1)
        for n in range(5):
            producer.send("ledger", f"entry-{n}".encode(), partition=0)
        producer.flush()
    with Consumer({**bootstrap, "group.id": "billing", "enable.auto.commit": False}) as c:
        c.commit({TopicPartition("orders", 0): 3})
    with Producer({**bootstrap, "transactional.id": "shop"}) as shop:
        shop.init_transactions()
        shop.begin_transaction()
        for n in range(2):
            shop.send("payments", f"paid-{n}".encode(), partition=0)
        shop.commit_transaction()
    stuck = Producer({**bootstrap, "transactional.id": "stuck"})
    stuck.init_transactions()
    stuck.begin_transaction()
    stuck.send("payments", b"pending", partition=0)
    stuck.flush()
    return State(stuck)


# ------------------------------------------------------------------------------ checks

Check = Callable[[Run, subprocess.CompletedProcess[str]], None]
CHECKS: dict[str, Check] = {}
B = "--bootstrap-server localhost:9092"


def check(command: str) -> Callable[[Check], Check]:
    def register(fn: Check) -> Check:
        assert command not in CHECKS, command
        CHECKS[command] = fn
        return fn
    return register


# kafka-topics.sh

@check(f"oncelog topics {B} --create --topic events --partitions 2 --replication-factor 1 "
       "--config cleanup.policy=compact --if-not-exists")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Created topic events.\n"
    with run.admin() as admin:
        assert admin.describe_topics(["events"])["events"].num_partitions == 2
    assert topic_config(run, "events", "cleanup.policy")[0] == "compact"


@check(f"oncelog topics {B} --create --topic placed --replica-assignment 1,1")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    with run.admin() as admin:
        assert dict(admin.describe_topics(["placed"])["placed"].replicas) == {0: (1,), 1: (1,)}


@check(f"oncelog topics {B} --list --exclude-internal")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    names = ok(r).split()
    assert {"events", "orders", "greetings"} <= set(names)
    assert not [name for name in names if name.startswith("__")]


@check(f"oncelog topics {B} --list --topic '__consumer.*'")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r).split() == ["__consumer_offsets"]


@check(f"oncelog topics {B} --command-config client.properties --describe --topic orders "
       "--partition-size-limit-per-response 100")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    rows = table(ok(r))
    assert rows[0][:2] == ["Topic", "Partition"]
    assert [row[:3] for row in rows[1:]] == [["orders", str(p), "1"] for p in range(3)]


@check(f"oncelog topics {B} --describe --under-replicated-partitions "
       "--unavailable-partitions --under-min-isr-partitions")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert len(table(ok(r))) == 1  # the header alone: one broker, every ISR whole


@check(f"oncelog topics {B} --describe --topic orders --at-min-isr-partitions")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert [row[:2] for row in table(ok(r))[1:]] == [["orders", str(p)] for p in range(3)]


@check(f"oncelog topics {B} --describe --topics-with-overrides --exclude-internal")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    rows = {row[0]: row for row in table(ok(r))[1:]}
    assert rows["events"][1:] == ["2", "1", "cleanup.policy=compact"]
    assert "orders" not in rows


@check(f"oncelog topics {B} --alter --topic events --partitions 4")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Topic events now has 4 partitions.\n"
    with run.admin() as admin:
        assert admin.describe_topics(["events"])["events"].num_partitions == 4


@check(f"oncelog topics {B} --delete --topic placed --if-exists")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Deleted topic placed.\n"
    with run.admin() as admin:
        assert "placed" not in admin.list_topics()


# kafka-console-producer.sh

@check(f"oncelog produce {B} --topic greetings --reader-property parse.key=true "
       "--reader-property key.separator=: < greetings.txt")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert records(run, "greetings") == [(b"alice", b"hi"), (b"bob", b"hey")]


@check(f"oncelog produce {B} --topic greetings --reader-config reader.properties "
       "--property ignore.error=true < mixed.txt")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert records(run, "greetings")[2:] == [(b"carol", b"yo"), (None, b"no-key-here")]


@check(f"oncelog produce {B} --topic greetings --request-required-acks all "
       "--compression-codec --sync --batch-size 16384 --max-partition-memory-bytes 16384 "
       "--timeout 0 --max-block-ms 10000 --max-memory-bytes 33554432 "
       "--message-send-max-retries 3 --retry-backoff-ms 100 --request-timeout-ms 5000 "
       "--metadata-expiry-ms 60000 --socket-buffer-size 102400 < one.txt")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert records(run, "greetings")[4:] == [(None, b"one")]
    log = run.broker.data_dir / "greetings-0" / "00000000000000000000.log"
    assert batch_compressions(log)[-1] == 1  # --compression-codec alone: gzip


@check(f"oncelog produce {B} --topic greetings --command-property client.id=greeter "
       "--producer-property linger.ms=0 --producer.config producer.properties < one.txt")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert records(run, "greetings")[5:] == [(None, b"one")]


# kafka-console-consumer.sh

@check(f"oncelog consume {B} --topic orders --from-beginning --max-messages 7 "
       "--formatter-property print.key=true --property print.partition=true "
       "--isolation-level read_uncommitted")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert sorted(ok(r).splitlines()) == [
        f"Partition:{0 if n < 5 else 1}\tk{n}\tv{n}" for n in range(7)]
    assert r.stderr.endswith("Processed a total of 7 messages\n")


@check(f"oncelog consume {B} --topic orders --partition 0 --offset 3 "
       "--formatter-config formatter.properties --timeout-ms 2000")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r).splitlines() == ["Offset:3\tv3", "Offset:4\tv4"]


@check(f"oncelog consume {B} --topic orders --group reader --from-beginning --max-messages 7 "
       "--command-property auto.commit.interval.ms=1000 "
       "--consumer-property session.timeout.ms=10000 --consumer.config consumer.properties "
       "--skip-message-on-error")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert len(ok(r).splitlines()) == 7
    assert committed(run, "reader") == {("orders", 0): 5, ("orders", 1): 2}


@check(f"oncelog consume {B} --include 'ord.*' --from-beginning --max-messages 7 "
       "--timeout-ms 5000")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert sorted(ok(r).splitlines()) == [f"v{n}" for n in range(7)]


# kafka-consumer-groups.sh

@check(f"oncelog groups {B} --list")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert "billing" in ok(r).split()


@check(f"oncelog groups {B} --list --state stable,empty --type")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    rows = table(ok(r))
    assert rows[0] == ["GROUP", "TYPE", "STATE"]
    assert ["billing", "Classic", "Empty"] in rows


@check(f"oncelog groups {B} --describe --group billing --offsets --timeout 10000")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert table(ok(r))[-1] == ["billing", "orders", "0", "3", "5", "2", "-", "-", "-"]


@check(f"oncelog groups {B} --describe --all-groups --members --verbose")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"] in \
        table(ok(r))


@check(f"oncelog groups {B} --describe --group billing --state")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    rows = table(ok(r))
    assert rows[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE",
                       "#MEMBERS"]
    assert rows[1] == ["billing", run.broker.bootstrap, "(1)", "Empty", "0"]


@check(f"oncelog groups {B} --reset-offsets --group billing --topic orders:0 --to-earliest "
       "--dry-run")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert table(ok(r))[1] == ["billing", "orders", "0", "0"]
    assert committed(run, "billing") == {("orders", 0): 3}


@check(f"oncelog groups {B} --reset-offsets --group billing --all-topics --shift-by -1 "
       "--execute")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert committed(run, "billing") == {("orders", 0): 2}


@check(f"oncelog groups {B} --reset-offsets --group billing --topic orders:0 --to-offset 1 "
       "--export")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "orders,0,1\n"
    assert committed(run, "billing") == {("orders", 0): 2}


@check(f"oncelog groups {B} --reset-offsets --group billing --from-file plan.csv --execute")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert committed(run, "billing") == {("orders", 0): 4}


@check(f"oncelog groups {B} --reset-offsets --group billing --topic orders:0 --to-current")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert table(ok(r))[1] == ["billing", "orders", "0", "4"]


@check(f"oncelog groups {B} --reset-offsets --group billing --topic orders:1 "
       "--to-datetime 2000-01-01T00:00:00.000 --execute")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert committed(run, "billing")[("orders", 1)] == 0


@check(f"oncelog groups {B} --reset-offsets --group billing --topic orders:1 "
       "--by-duration PT1H")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert table(ok(r))[1] == ["billing", "orders", "1", "0"]


@check(f"oncelog groups {B} --reset-offsets --group billing --topic orders:1 --to-latest "
       "--execute")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert committed(run, "billing")[("orders", 1)] == 2


@check(f"oncelog groups {B} --delete-offsets --group billing --topic orders:1")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ["orders", "1", "Successful"] in table(ok(r))
    assert committed(run, "billing") == {("orders", 0): 4}


@check(f"oncelog groups {B} --delete --group billing")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Deletion of requested consumer groups ('billing') was successful.\n"
    with run.admin() as admin:
        assert "billing" not in [g.group_id for g in admin.list_consumer_groups()]


# kafka-configs.sh

@check(f"oncelog configs {B} --alter --entity-type topics --entity-name settings "
       "--add-config retention.ms=60000,cleanup.policy=[delete,compact]")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Completed updating config for topic settings.\n"
    assert topic_config(run, "settings", "retention.ms")[0] == "60000"
    assert topic_config(run, "settings", "cleanup.policy")[0] == "delete,compact"


@check(f"oncelog configs {B} --describe --topic settings")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    lines = ok(r).splitlines()
    assert lines[0] == "Dynamic configs for topic settings are:"
    assert any(line.startswith("  retention.ms=60000 sensitive=false") for line in lines)


@check(f"oncelog configs {B} --alter --topic settings --delete-config retention.ms")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert topic_config(run, "settings", "retention.ms")[1] != "DYNAMIC_TOPIC_CONFIG"


@check(f"oncelog configs {B} --alter --topic settings --add-config-file settings.properties")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert topic_config(run, "settings", "segment.ms")[0] == "3600000"


@check(f"oncelog configs {B} --describe --entity-type topics --entity-name settings --all")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    lines = ok(r).splitlines()
    assert lines[0] == "All configs for topic settings are:"
    assert any(line.startswith("  segment.bytes=1073741824 ") for line in lines)


@check(f"oncelog configs {B} --alter --broker-defaults --add-config max.connections=1000")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Completed updating default config for brokers in the cluster.\n"


@check(f"oncelog configs {B} --alter --broker 1 --add-config max.connections=2000")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == "Completed updating config for broker 1.\n"


@check(f"oncelog configs {B} --describe --broker 1")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    lines = ok(r).splitlines()
    assert lines[0] == "Dynamic configs for broker 1 are:"
    assert lines[1].startswith("  max.connections=2000 sensitive=false synonyms="
                               "{DYNAMIC_BROKER_CONFIG:max.connections=2000, "
                               "DYNAMIC_DEFAULT_BROKER_CONFIG:max.connections=1000")


# kafka-dump-log.sh

SEGMENT = "data/orders-0/00000000000000000000"


@check(f"oncelog dump-log --files {SEGMENT}.log --print-data-log")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert re.search(r"^\| offset: 4 CreateTime: \d+ key: k4 payload: v4 headers: \[\]$",
                     ok(r), re.MULTILINE)


@check(f"oncelog dump-log --files {SEGMENT}.log --deep-iteration")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    out = ok(r)
    assert re.search(r"^\| offset: 4 CreateTime: \d+ keySize: 2 valueSize: 2 sequence: 4 "
                     r"headerKeys: \[\]$", out, re.MULTILINE), out
    assert "payload:" not in out


@check(f"oncelog dump-log --files {SEGMENT}.log --print-data-log --skip-record-metadata "
       "--max-bytes 1000000")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    records_ = [line for line in ok(r).splitlines() if line.startswith("|")]
    assert records_ == [f"| key: k{n} payload: v{n} headers: []" for n in range(5)]


@check(f"oncelog dump-log --files {SEGMENT}.index,{SEGMENT}.timeindex --index-sanity-check")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert [line for line in ok(r).splitlines() if not line.startswith("Dumping ")] == [
        f"{SEGMENT}.index passed sanity check.", f"{SEGMENT}.timeindex passed sanity check."]


@check(f"oncelog dump-log --files {SEGMENT}.index,{SEGMENT}.timeindex --verify-index-only")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r) == f"Dumping {SEGMENT}.index\nDumping {SEGMENT}.timeindex\n"
    assert r.stderr == ""


# kafka-transactions.sh

@check(f"oncelog txn {B} list --duration-filter -1 --transactional-id-pattern 'sh.*'")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert [row[0] for row in table(ok(r))[1:]] == ["shop"]


@check(f"oncelog txn {B} describe --transactional-id shop")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert table(ok(r))[1][1:5:3] == ["shop", "CompleteCommit"]


@check(f"oncelog txn {B} describe-producers --topic payments --partition 0 --broker-id 1")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert sorted(row[-1] for row in table(ok(r))[1:]) == ["-1", "3"]


@check(f"oncelog txn {B} find-hanging --broker-id 1 --max-transaction-timeout 15")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert len(table(ok(r))) == 1  # stuck's transaction is young and its coordinator's


@check(f"oncelog txn {B} abort --topic payments --partition 0 --start-offset 3")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert "ABORT marker written" in ok(r)
    tp = TopicPartition("payments", 0)
    with run.admin() as admin:
        latest = admin.list_offsets([tp], OffsetSpec.latest())[tp]
        stable = admin.list_offsets([tp], OffsetSpec.latest(),
                                    isolation_level="read_committed")[tp]
    assert stable == latest == 5  # nothing open below the end: the LSO moved up


@check(f"oncelog txn {B} forceTerminateTransaction --transactionalId stuck")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert ok(r).startswith("Force-terminated transactional id 'stuck'")


# kafka-delete-records.sh

@check(f"oncelog records delete {B} --command-config client.properties "
       "--offset-json-file offsets.json")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert "partition: ledger-0\tlow_watermark: 3" in ok(r).splitlines()
    tp = TopicPartition("ledger", 0)
    with run.admin() as admin:
        assert admin.list_offsets([tp], OffsetSpec.earliest())[tp] == 3


# kafka-acls.sh

@check(f"oncelog acls {B} --add --allow-principal User:alice --operation Read "
       "--operation Describe --topic orders --group billing")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert acls_of(run, "User:alice") == {
        (kind, name, "LITERAL", op, "ALLOW")
        for kind, name in (("TOPIC", "orders"), ("GROUP", "billing"))
        for op in ("READ", "DESCRIBE")}


@check(f"oncelog acls {B} --add --allow-principal User:bob --producer --topic orders "
       "--transactional-id shop --idempotent")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert acls_of(run, "User:bob") == {
        ("TOPIC", "orders", "LITERAL", "WRITE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "DESCRIBE", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "CREATE", "ALLOW"),
        ("TRANSACTIONAL_ID", "shop", "LITERAL", "WRITE", "ALLOW"),
        ("TRANSACTIONAL_ID", "shop", "LITERAL", "DESCRIBE", "ALLOW"),
        ("CLUSTER", "kafka-cluster", "LITERAL", "IDEMPOTENT_WRITE", "ALLOW"),
    }


@check(f"oncelog acls {B} --add --allow-principal User:carol --consumer --topic orders "
       "--group reader")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert acls_of(run, "User:carol") == {
        ("TOPIC", "orders", "LITERAL", "READ", "ALLOW"),
        ("TOPIC", "orders", "LITERAL", "DESCRIBE", "ALLOW"),
        ("GROUP", "reader", "LITERAL", "READ", "ALLOW"),
    }


@check(f"oncelog acls {B} --add --deny-principal User:mallory --deny-host 10.0.0.1 "
       "--topic ord --resource-pattern-type prefixed")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert acls_of(run, "User:mallory") == {("TOPIC", "ord", "PREFIXED", "ALL", "DENY")}


@check(f"oncelog acls {B} --list --topic orders --principal User:bob")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    assert sorted(row[5] for row in table(ok(r))[1:]) == ["CREATE", "DESCRIBE", "WRITE"]


@check(f"oncelog acls {B} --remove --allow-principal User:alice --operation Read "
       "--operation Describe --topic orders --group billing --force")
def _(run: Run, r: subprocess.CompletedProcess[str]) -> None:
    ok(r)
    assert acls_of(run, "User:alice") == set()


# ------------------------------------------------------------------------------ the test

def run_wrong_flag(run: Run, row: Row) -> None:
    result = run.run(row.command)
    words = shlex.split(row.command)
    err = result.stderr.splitlines()
    assert result.returncode == 2, (row.command, result.stderr)
    assert err[0].startswith(f"usage: oncelog {words[1]} "), (row.command, err[0])
    assert err[-1].startswith(f"oncelog {words[1]}") and ": hint: " in err[-1], err
    assert row.hint in err[-1], (row.command, err[-1])


def run_section(run: Run, rows: list[Row]) -> list[str]:
    """Run one section's rows in order; what failed (the section stops at its first)."""
    for row in rows:
        try:
            if row.section == WRONG_FLAG:
                run_wrong_flag(run, row)
            else:
                CHECKS[row.command](run, run.run(row.command))
        except AssertionError as exc:
            return [f"{row.section}: {row.command}\n  {exc}"]
    return []


@pytest.fixture
def run(broker_factory: BrokerFactory, tmp_path: Path) -> Iterator[Run]:
    broker = broker_factory(configs={"authorizer.class.name": oacl.AUTHORIZER_CLASS,
                                     "super.users": "User:ANONYMOUS",
                                     "group.initial.rebalance.delay.ms": 0})
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    yield Run(broker, cwd)


def test_every_row_has_a_check_and_every_tool_rows() -> None:
    rows = [row for row in doc_rows() if row.section != WRONG_FLAG]
    commands = [row.command for row in rows]
    assert len(commands) == len(set(commands)), "a command is in the tables twice"
    assert sorted(set(commands) - set(CHECKS)) == [], "rows without a check"
    assert sorted(set(CHECKS) - set(commands)) == [], "checks of no row"
    assert set(TOOLS) <= {row.section for row in rows}
    assert len([row for row in doc_rows() if row.section == WRONG_FLAG]) >= len(TOOLS)


def test_each_mapped_form_against_a_broker(run: Run) -> None:
    state = setup(run)
    sections: dict[str, list[Row]] = {}
    for row in doc_rows():
        if row.command in CHECKS or row.section == WRONG_FLAG:
            sections.setdefault(row.section, []).append(row)
    try:
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            failures = [f for found in pool.map(lambda rows: run_section(run, rows),
                                                sections.values()) for f in found]
    finally:
        state.stuck.close(1)
    assert failures == []
