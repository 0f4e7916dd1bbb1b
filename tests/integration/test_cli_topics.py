"""``oncelog topics create|list|describe|delete`` against a real broker."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

from oncelog.client import Admin, Producer
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from oncelog.harness.net import free_port, wait_for_port
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
                                    "Internal", "CleanupPolicy"]
    assert [line.split()[1] for line in described[1:]] == ["0", "1", "2"]
    assert all(line.split()[2:5] == ["1", "1", "1"] for line in described[1:])
    assert all(line.split()[6] == "compact" for line in described[1:])

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


def test_describe_shows_the_cleaner_state_of_compacted_partitions(
    broker_factory: Callable[..., BrokerProcess],
) -> None:
    """cleanup.policy comes from DescribeConfigs; the dirty ratio and last clean time of a
    compacted partition from the broker's metrics endpoint (``--metrics-url``: no Kafka
    API carries the cleaner's state)."""
    port = free_port()
    broker = broker_factory(configs={"log.cleaner.backoff.ms": 100},
                            extra_args=["--metrics", f"127.0.0.1:{port}"])
    assert wait_for_port("127.0.0.1", port, 10), "metrics endpoint did not open"
    url = f"http://127.0.0.1:{port}/metrics"
    compacted, plain = unique_topic("clicompact"), unique_topic("cliplain")
    assert topics_cli(broker, "create", compacted, "--partitions", "1", "--config",
                      "cleanup.policy=compact", "--config", "segment.bytes=1024",
                      "--config", "min.cleanable.dirty.ratio=0.01").returncode == 0
    assert topics_cli(broker, "create", plain, "--partitions", "1").returncode == 0
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}) as producer:
        for i in range(60):  # one key rewritten: several rolled segments to clean
            producer.send(compacted, b"v" * 40 + str(i).encode(), key=b"k")
            producer.flush(30)

    def rows() -> dict[str, list[str]]:
        out = topics_cli(broker, "describe", compacted, plain, "--metrics-url", url)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].split() == ["Topic", "Partition", "Leader", "Replicas", "Isr",
                                    "Internal", "CleanupPolicy", "DirtyRatio", "LastClean"]
        return {line.split()[0]: line.split() for line in lines[1:]}

    deadline = time.monotonic() + 30
    while (found := rows())[compacted][8] == "never":
        assert time.monotonic() < deadline, (found, broker.log_tail(20))
        time.sleep(0.2)  # polling interval of a deadline wait, not a synchronisation
    assert found[compacted][6] == "compact" and 0.0 <= float(found[compacted][7]) <= 1.0
    assert found[compacted][8].startswith("20")  # an ISO time
    assert found[plain][6:] == ["delete", "-", "-"]
    without = topics_cli(broker, "describe", compacted).stdout.splitlines()
    assert without[0].split()[-1] == "CleanupPolicy"  # no endpoint, no cleaner columns
