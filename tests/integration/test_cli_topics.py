"""``oncelog topics create|list|describe|delete`` against a real broker."""

from __future__ import annotations

import subprocess
import sys

from oncelog.client import Admin
from tests.support.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_topic


def topics_cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog.cli.main", "topics", *args,
         "--bootstrap-server", broker.bootstrap],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_create_list_describe_delete(shared_broker: BrokerProcess) -> None:
    topic = unique_topic("clitopic")
    created = topics_cli(shared_broker, "create", topic, "--partitions", "3",
                         "--config", "cleanup.policy=compact")
    assert created.returncode == 0, created.stderr
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        assert admin.list_topics()[topic] == 3

    again = topics_cli(shared_broker, "create", topic, "--partitions", "3")
    assert again.returncode == 1 and "TOPIC_ALREADY_EXISTS" in again.stderr
    assert topics_cli(shared_broker, "create", topic, "--if-not-exists").returncode == 0
    bad = topics_cli(shared_broker, "create", unique_topic("x"), "--config", "novalue")
    assert bad.returncode == 2 and "KEY=VALUE" in bad.stderr

    listed = topics_cli(shared_broker, "list")
    assert topic in listed.stdout.split()
    assert "__consumer_offsets" not in listed.stdout
    assert "__consumer_offsets" in topics_cli(shared_broker, "list", "--internal").stdout

    described = topics_cli(shared_broker, "describe", topic).stdout.splitlines()
    assert described[0].split() == ["Topic", "Partition", "Leader", "Replicas", "Isr",
                                    "Internal"]
    assert [line.split()[1] for line in described[1:]] == ["0", "1", "2"]
    assert all(line.split()[2:5] == ["1", "1", "1"] for line in described[1:])

    missing = unique_topic("missing")
    unknown = topics_cli(shared_broker, "describe", missing)
    assert unknown.returncode == 1 and missing in unknown.stderr
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        assert missing not in admin.list_topics()  # looking it up did not create it

    deleted = topics_cli(shared_broker, "delete", topic)
    assert deleted.returncode == 0 and f"Deleted topic {topic}." in deleted.stdout
    assert topic not in topics_cli(shared_broker, "list").stdout.split()
    gone = topics_cli(shared_broker, "delete", topic)
    assert gone.returncode == 1 and "UNKNOWN_TOPIC_OR_PARTITION" in gone.stdout
