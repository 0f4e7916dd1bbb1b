"""``oncelog groups`` against a real broker: list, describe with the right lag per partition
(committed offset vs log end offset, as kafka-consumer-groups.sh), members, reset-offsets
dry run and execute (and refused while the group is active), delete."""

from __future__ import annotations

import subprocess

from oncelog.client import Admin, Consumer, Producer, TopicPartition
from oncelog.harness.broker import BrokerProcess
from tests.support.cli import ok
from tests.support.cli import oncelog_cli as cli
from tests.support.names import unique_name, unique_topic


def groups(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return cli("groups", *args, "--bootstrap-server", broker.bootstrap)


def rows(stdout: str) -> list[list[str]]:
    return [line.split() for line in stdout.splitlines() if line.strip()]


def setup_group(broker: BrokerProcess) -> tuple[str, str]:
    """A topic with 5 records on partition 0 and 2 on partition 1, and a group that
    committed 3 on partition 0 and nothing on partition 1."""
    topic = unique_topic("groups")
    group = unique_name("cli-group")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 2)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for n in range(5):
            producer.send(topic, f"p0-{n}".encode(), partition=0)
        for n in range(2):
            producer.send(topic, f"p1-{n}".encode(), partition=1)
        producer.flush()
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                   "enable.auto.commit": False}) as consumer:
        consumer.commit({TopicPartition(topic, 0): 3})
    return topic, group


def test_list_describe_and_lag(shared_broker: BrokerProcess) -> None:
    topic, group = setup_group(shared_broker)
    assert group in ok(groups(shared_broker, "list")).split()
    assert [group, "Empty"] in rows(ok(groups(shared_broker, "list", "--state")))
    out = ok(groups(shared_broker, "describe", group))
    assert f"Consumer group '{group}' has no active members." in out
    table = rows(out)[-2:]
    assert table[0][0] == "GROUP"
    assert table[1] == [group, topic, "0", "3", "5", "2", "-", "-", "-"]
    # A member that owns both partitions: its rows show it; partition 1 has no offset yet.
    with Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group,
                   "client.id": "lag-reader", "enable.auto.commit": False}) as consumer:
        consumer.subscribe([topic])
        for _ in range(60):
            consumer.poll(0.5)
            if len(consumer.assignment()) == 2:
                break
        assert len(consumer.assignment()) == 2
        described = rows(ok(groups(shared_broker, "describe", group)))
        by_partition = {row[2]: row for row in described[1:]}
        assert by_partition["0"][3:6] == ["3", "5", "2"]
        assert by_partition["1"][3:6] == ["-", "2", "-"]
        assert by_partition["0"][8] == "lag-reader"
        members = rows(ok(groups(shared_broker, "describe", group, "--members")))
        assert members[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert members[1][0] == group and members[1][3:] == ["lag-reader", "2"]
        # An active group's offsets cannot be reset (as Kafka).
        refused = groups(shared_broker, "reset-offsets", group, "--topic", topic,
                         "--to-earliest", "--execute")
        assert refused.returncode == 1 and refused.stdout == ""
        assert "can only be reset if the group" in refused.stderr
        assert "is inactive, but the current state is Stable" in refused.stderr


def test_reset_offsets_dry_run_then_execute(shared_broker: BrokerProcess) -> None:
    topic, group = setup_group(shared_broker)
    dry = ok(groups(shared_broker, "reset-offsets", group, "--topic", topic, "--to-earliest"))
    assert rows(dry)[:3] == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                             [group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert "dry run" in dry
    # Nothing changed.
    assert rows(ok(groups(shared_broker, "describe", group)))[-1][3] == "3"
    shifted = ok(groups(shared_broker, "reset-offsets", group, "--topic", f"{topic}:0",
                        "--shift-by", "-10", "--execute"))
    assert rows(shifted)[1:] == [[group, topic, "0", "0"]]  # clamped to the earliest
    assert rows(ok(groups(shared_broker, "describe", group)))[-1][3:6] == ["0", "5", "5"]
    ok(groups(shared_broker, "reset-offsets", group, "--all-topics", "--to-offset", "4",
              "--execute"))
    ok(groups(shared_broker, "reset-offsets", group, "--topic", f"{topic}:1", "--to-latest",
              "--execute"))
    described = {row[2]: row for row in rows(ok(groups(shared_broker, "describe", group)))[1:]}
    assert described["0"][3:6] == ["4", "5", "1"]
    assert described["1"][3:6] == ["2", "2", "0"]
    # The group's consumer starts where the reset put it.
    with Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": group}) as c:
        c.assign([TopicPartition(topic, 0)])
        got = []
        for _ in range(20):
            got += c.poll(0.5)
            if got:
                break
        assert [m.value for m in got] == [b"p0-4"]


def test_delete_group_and_errors(shared_broker: BrokerProcess) -> None:
    _, group = setup_group(shared_broker)
    assert ok(groups(shared_broker, "delete", group)) == (
        f"Deletion of requested consumer groups ('{group}') was successful.\n"
    )
    assert group not in ok(groups(shared_broker, "list")).split()
    missing = groups(shared_broker, "describe", group)
    assert missing.returncode == 1 and missing.stdout == ""
    assert f"consumer group {group!r} does not exist" in missing.stderr
    again = groups(shared_broker, "delete", group)
    assert again.returncode == 1 and "does not exist" in again.stderr
    usage = groups(shared_broker, "reset-offsets", group, "--to-earliest")
    assert usage.returncode == 2 and "one of the arguments --topic --all-topics" in usage.stderr
