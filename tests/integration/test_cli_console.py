"""``oncelog produce``, ``oncelog consume`` and ``oncelog offsets`` against a real broker, run
as subprocesses the way a user runs them: keys, headers, JSON, transactional produce, a
consume of a topic with an aborted and a committed transaction (read_committed by default,
read_uncommitted on request), the LSO column with an open transaction, errors on stderr,
and a consumer whose reader goes away (``| head -1``)."""

from __future__ import annotations

import json
import subprocess
import sys

from oncelog.client import Admin, Producer
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.cli import ok
from tests.support.cli import oncelog_cli as cli
from tests.support.names import unique_name, unique_topic


def make_topic(broker: BrokerProcess, partitions: int = 1) -> str:
    topic = unique_topic("console")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    return topic


def consume(broker: BrokerProcess, topic: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
               "--from-beginning", "--timeout-ms", "1500", *extra)


def test_produce_keys_and_headers_then_consume_them_back(shared_broker: BrokerProcess) -> None:
    topic = make_topic(shared_broker)
    ok(cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           "--property", "parse.key=true", "--property", "key.separator=:",
           "--header", "source=cli", stdin="k1:v1\nk2:v2\n"))
    ok(cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           "--property", "parse.headers=true", "--property", "parse.key=true",
           stdin="a:1,b:2\tk3\tv3\n"))
    result = consume(shared_broker, topic, "--print-key", "--print-headers", "--print-offset",
                     "--print-partition", "--max-messages", "3")
    assert ok(result).splitlines() == [
        "Partition:0\tOffset:0\tsource:cli\tk1\tv1",
        "Partition:0\tOffset:1\tsource:cli\tk2\tv2",
        "Partition:0\tOffset:2\ta:1,b:2\tk3\tv3",
    ]
    assert "Processed a total of 3 messages" in result.stderr
    # Kafka's property names do the same.
    same = consume(shared_broker, topic, "--property", "print.key=true",
                   "--property", "key.separator=|", "--max-messages", "1")
    assert ok(same) == "k1|v1\n"


def test_produce_and_consume_json(shared_broker: BrokerProcess) -> None:
    topic = make_topic(shared_broker, partitions=2)
    lines = [
        {"key": "a", "value": "x", "headers": {"h": "1"}, "partition": 1},
        {"key": None, "value": {"n": 2}, "partition": 0},
    ]
    ok(cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           "--format", "json", stdin="".join(json.dumps(line) + "\n" for line in lines)))
    out = ok(consume(shared_broker, topic, "--format", "json", "--max-messages", "2"))
    got = sorted((json.loads(line) for line in out.splitlines()), key=lambda r: r["partition"])
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in got] == [
        (0, 0, None, '{"n": 2}', {}),
        (1, 0, "a", "x", {"h": "1"}),
    ]


def test_transactional_produce_commits_every_n_records_and_at_eof(
    shared_broker: BrokerProcess,
) -> None:
    topic = make_topic(shared_broker)
    result = cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                 "--transactional-id", unique_name("console-txn"), "--commit-every", "2",
                 stdin="1\n2\n3\n4\n5\n")
    ok(result)
    assert "produced 5 records in committed transactions" in result.stderr
    # Three transactions (2 + 2 + 1 records), each followed by its COMMIT marker: the
    # records sit at 0,1 / 3,4 / 6 and the LSO is the log end.
    out = ok(consume(shared_broker, topic, "--print-offset"))
    assert out.splitlines() == ["Offset:0\t1", "Offset:1\t2", "Offset:3\t3", "Offset:4\t4",
                                "Offset:6\t5"]
    table = ok(cli("offsets", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic))
    assert table.splitlines()[1].split() == [topic, "0", "0", "8", "8", "0"]


def test_consume_aborted_and_committed_transactions_by_isolation_level(
    shared_broker: BrokerProcess,
) -> None:
    topic = make_topic(shared_broker)
    config = {"bootstrap.servers": shared_broker.bootstrap,
              "transactional.id": unique_name("console-abort")}
    with Producer(config) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"aborted-1", partition=0)
        producer.send(topic, b"aborted-2", partition=0)
        producer.flush()  # in the log, then aborted
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed-1", partition=0)
        producer.commit_transaction()
    default = consume(shared_broker, topic)
    assert ok(default) == "committed-1\n"
    assert "Processed a total of 1 messages" in default.stderr
    uncommitted = consume(shared_broker, topic, "--isolation-level", "read_uncommitted")
    assert ok(uncommitted).splitlines() == ["aborted-1", "aborted-2", "committed-1"]


def test_offsets_shows_the_lso_held_back_by_an_open_transaction(
    shared_broker: BrokerProcess,
) -> None:
    topic = make_topic(shared_broker, partitions=2)
    with Producer({"bootstrap.servers": shared_broker.bootstrap}) as plain:
        plain.send(topic, b"before", partition=0)
        plain.flush()
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap,
                         "transactional.id": unique_name("console-open")})
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for value in (b"o1", b"o2", b"o3"):
            producer.send(topic, value, partition=0)
        producer.flush()
        out = ok(cli("offsets", "--bootstrap-server", shared_broker.bootstrap,
                     "--topic", topic))
        assert [line.split() for line in out.splitlines()] == [
            ["TOPIC", "PARTITION", "EARLIEST", "LATEST", "LSO", "UNSTABLE"],
            [topic, "0", "0", "4", "1", "3"],
            [topic, "1", "0", "0", "0", "0"],
        ]
        # A read_committed consume stops at the LSO: only the record before the transaction.
        assert ok(consume(shared_broker, topic)) == "before\n"
    finally:
        producer.abort_transaction()
        producer.close()


def test_consume_with_a_group_commits_what_it_printed(shared_broker: BrokerProcess) -> None:
    topic = make_topic(shared_broker)
    ok(cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           stdin="a\nb\nc\n"))
    group = unique_name("console-group")
    first = consume(shared_broker, topic, "--group", group, "--max-messages", "2")
    assert ok(first) == "a\nb\n"
    # The next run of the group continues where the first stopped printing.
    again = cli("consume", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                "--group", group, "--timeout-ms", "1500")
    assert ok(again) == "c\n"


def test_errors_go_to_stderr_with_nonzero_exit(shared_broker: BrokerProcess) -> None:
    missing = unique_topic("missing")
    result = consume(shared_broker, missing)
    assert result.returncode == 1 and result.stdout == ""
    assert f"topic {missing!r} does not exist" in result.stderr
    result = cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", missing,
                 stdin="x\n")
    assert result.returncode == 1 and f"topic {missing!r} does not exist" in result.stderr
    topic = make_topic(shared_broker)
    result = cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                 "--property", "parse.key=true", stdin="no-separator\n")
    assert result.returncode == 1
    assert "line 1: no key separator" in result.stderr
    result = cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
                 "--property", "nonsense=1", stdin="x\n")
    assert result.returncode == 2 and "unknown --property nonsense" in result.stderr
    result = cli("offsets", "--bootstrap-server", "127.0.0.1:1", "--timeout-ms", "2000")
    assert result.returncode == 1 and "cannot reach 127.0.0.1:1" in result.stderr


def test_consume_into_a_closed_pipe_ends_quietly(shared_broker: BrokerProcess) -> None:
    topic = make_topic(shared_broker)
    ok(cli("produce", "--bootstrap-server", shared_broker.bootstrap, "--topic", topic,
           stdin="".join(f"line-{n}-{'x' * 200}\n" for n in range(2000))))
    pipeline = subprocess.run(
        f"{sys.executable} -m oncelog consume --bootstrap-server {shared_broker.bootstrap} "
        f"--topic {topic} --from-beginning --timeout-ms 3000 | head -1",
        shell=True, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert pipeline.stdout.startswith("line-0-"), pipeline
    assert pipeline.stdout.count("\n") == 1
    assert "Traceback" not in pipeline.stderr, pipeline.stderr
    assert "Broken pipe" not in pipeline.stderr, pipeline.stderr
