"""``oncelog configs --describe|--alter`` (kafka-configs.sh's options and output) against a
real broker."""

from __future__ import annotations

import subprocess

import pytest
from test_cli_txn import run_cli

from oncelog.cli.common import CommandError
from oncelog.cli.configs import parse_add_config
from oncelog.client import Admin, NewTopic
from oncelog.harness.broker import BrokerProcess


def configs_cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("configs", *args, "--bootstrap-server", broker.bootstrap)


def config_lines(output: str) -> dict[str, str]:
    """``  name=value sensitive=... synonyms={...}`` lines: name -> the rest after '='."""
    out = {}
    for line in output.splitlines():
        if line.startswith("  "):
            name, _, rest = line.strip().partition("=")
            out[name] = rest
    return out


def test_parse_add_config_keeps_bracketed_lists_whole() -> None:
    assert parse_add_config("retention.ms=1000, cleanup.policy=[delete,compact],x.y=") == {
        "retention.ms": "1000", "cleanup.policy": "delete,compact", "x.y": "",
    }
    with pytest.raises(CommandError):
        parse_add_config("novalue")
    with pytest.raises(CommandError):
        parse_add_config("bad key!=1")


def test_topic_configs_alter_and_describe(broker: BrokerProcess) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.create_topics([NewTopic("cfg", 1, 1)]) == {"cfg": None}
    topic = ("--entity-type", "topics", "--entity-name", "cfg")

    empty = configs_cli(broker, *topic, "--describe")
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == "Dynamic configs for topic cfg are:\n"

    altered = configs_cli(broker, *topic, "--alter",
                          "--add-config", "retention.ms=60000,cleanup.policy=[delete,compact]")
    assert altered.returncode == 0, altered.stderr
    assert altered.stdout == "Completed updating config for topic cfg.\n"

    described = configs_cli(broker, *topic, "--describe")
    assert described.stdout.splitlines()[0] == "Dynamic configs for topic cfg are:"
    lines = config_lines(described.stdout)
    assert sorted(lines) == ["cleanup.policy", "retention.ms"]
    assert lines["retention.ms"].startswith(
        "60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000")
    assert lines["cleanup.policy"].startswith(
        "delete,compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy="
        "delete,compact")

    every = configs_cli(broker, *topic, "--describe", "--all")
    assert every.stdout.splitlines()[0] == "All configs for topic cfg are:"
    lines = config_lines(every.stdout)
    assert lines["segment.bytes"].startswith("1073741824 sensitive=false synonyms={")
    assert len(lines) > 20

    deleted = configs_cli(broker, *topic, "--alter", "--delete-config", "retention.ms")
    assert deleted.returncode == 0, deleted.stderr
    assert sorted(config_lines(configs_cli(broker, *topic, "--describe").stdout)) == [
        "cleanup.policy"]

    not_set = configs_cli(broker, *topic, "--alter", "--delete-config", "retention.ms")
    assert not_set.returncode == 1 and "Invalid config(s): retention.ms" in not_set.stderr
    unknown = configs_cli(broker, *topic, "--alter", "--add-config", "no.such.config=1")
    assert unknown.returncode == 1 and "INVALID_CONFIG" in unknown.stderr
    wrong = configs_cli(broker, *topic, "--alter", "--add-config", "retention.ms=abc")
    assert wrong.returncode == 1 and "INVALID_CONFIG" in wrong.stderr
    missing = configs_cli(broker, "--entity-type", "topics", "--entity-name", "nope",
                          "--describe")
    # Said before anything is printed (no "Dynamic configs for topic nope are:" first).
    assert missing.returncode == 1 and missing.stdout == ""
    assert "The topic 'nope' doesn't exist" in missing.stderr

    listed = configs_cli(broker, "--entity-type", "topics", "--describe")
    assert "Dynamic configs for topic cfg are:" in listed.stdout.splitlines()
    assert "Dynamic configs for topic __consumer_offsets are:" in listed.stdout.splitlines()


def test_broker_configs_alter_and_describe(broker: BrokerProcess) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        node = str(admin.describe_cluster().controller_id)
    default = ("--entity-type", "brokers", "--entity-default")
    mine = ("--entity-type", "brokers", "--entity-name", node)

    set_default = configs_cli(broker, *default, "--alter", "--add-config",
                              "log.retention.ms=7200000")
    assert set_default.returncode == 0, set_default.stderr
    assert set_default.stdout == "Completed updating default config for brokers in the cluster.\n"
    shown = configs_cli(broker, *default, "--describe")
    assert shown.stdout.splitlines()[0] == "Default configs for brokers in the cluster are:"
    assert config_lines(shown.stdout)["log.retention.ms"] == (
        "7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}")

    assert configs_cli(broker, *mine, "--alter", "--add-config",
                       "log.retention.ms=3600000").returncode == 0
    own = configs_cli(broker, *mine, "--describe")
    assert own.stdout.splitlines()[0] == f"Dynamic configs for broker {node} are:"
    assert config_lines(own.stdout)["log.retention.ms"].startswith(
        "3600000 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=3600000, "
        "DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000")
    every = config_lines(configs_cli(broker, *mine, "--describe", "--all").stdout)
    assert every["node.id"].startswith(f"{node} sensitive=false")

    both = configs_cli(broker, "--entity-type", "brokers", "--describe").stdout.splitlines()
    assert f"Dynamic configs for broker {node} are:" in both
    assert "Default configs for brokers in the cluster are:" in both

    read_only = configs_cli(broker, *mine, "--alter", "--add-config", "node.id=9")
    assert read_only.returncode == 1 and "INVALID_REQUEST" in read_only.stderr
    not_an_id = configs_cli(broker, "--entity-type", "brokers", "--entity-name", "abc",
                            "--describe")
    assert not_an_id.returncode == 2 and "valid integer broker id" in not_an_id.stderr
    no_entity = configs_cli(broker, "--entity-type", "topics", "--alter", "--add-config", "a=1")
    assert no_entity.returncode == 2
