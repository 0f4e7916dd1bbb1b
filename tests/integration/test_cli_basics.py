"""The ``oncelog`` command itself, as a user meets it: ``--version`` on every command,
``python -m oncelog``, every option's help with its default, usage errors on stderr with
exit 2 and no traceback (a bad ``--log-level``), and the broker's startup summary line."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

import oncelog
from oncelog.cli.main import build_parser
from oncelog.client import Admin, Producer
from oncelog.harness.broker import BrokerProcess
from tests.support.cli import oncelog_cli
from tests.support.names import unique_topic

BrokerFactory = Callable[..., BrokerProcess]


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[
    tuple[tuple[str, ...], argparse.ArgumentParser]
]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += _commands(child, (*path, name))
    return found


def test_version_on_oncelog_and_python_dash_m() -> None:
    for module in ("oncelog", "oncelog.cli.main"):
        result = oncelog_cli("--version", module=module)
        assert result.returncode == 0
        assert result.stdout.strip() == f"oncelog {oncelog.__version__}"


def test_every_command_has_version_and_every_option_help_with_default() -> None:
    commands = _commands(build_parser())
    assert len(commands) > 10
    for path, parser in commands:
        options = {s for a in parser._actions for s in a.option_strings}
        assert "--version" in options, path
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help is argparse.SUPPRESS:
                continue
            assert action.help, (path, action.dest)
    # A sample through the real command: serve's help shows each default.
    result = oncelog_cli("serve", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for expected in ("(default 127.0.0.1:9092)", "(default INFO)", "(default: off)"):
        assert expected in text, text
    nested = oncelog_cli("txn", "describe", "--version")
    assert (nested.returncode, nested.stdout.strip()) == (0, f"oncelog {oncelog.__version__}")


def test_bad_log_level_is_a_usage_error_without_traceback() -> None:
    result = oncelog_cli("serve", "--log-level", "chatty", "--listen", "127.0.0.1:0")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "unknown log level 'chatty'" in result.stderr
    assert "DEBUG, INFO, WARNING, ERROR, CRITICAL" in result.stderr


def test_unknown_command_and_option_errors_go_to_stderr() -> None:
    result = oncelog_cli("frobnicate")
    assert (result.returncode, result.stdout) == (2, "")
    assert "invalid choice" in result.stderr
    result = oncelog_cli("topics", "list", "--no-such-option")
    assert (result.returncode, result.stdout) == (2, "")
    assert "unrecognized arguments" in result.stderr


def test_startup_logs_one_summary_line_not_lines_per_partition(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory()
    topic = unique_topic("startup")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 8)
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        for partition in range(8):
            producer.send(topic, b"v", partition=partition)
        producer.flush()
    broker.stop()
    broker.start()
    log = broker.log_text(since_start=True)
    assert len(re.findall(rf"{topic}-\d+: opened", log)) == 0, log
    assert "loaded producer snapshot" not in log
    summary = re.findall(
        r"loaded (\d+) topics, (\d+) partitions in \d+ ms: 0 recovered after an unclean "
        r"stop, 0 batches replayed", log,
    )
    assert len(summary) == 1, log
    assert int(summary[0][1]) >= 8
    # After kill -9 the recovery work is in the summary (and per recovered partition).
    with Producer({"bootstrap.servers": broker.bootstrap}) as producer:
        producer.send(topic, b"w", partition=0)
        producer.flush()
    broker.restart(kill=True)
    log = broker.log_text(since_start=True)
    summary = re.findall(r"partitions in \d+ ms: (\d+) recovered after an unclean stop", log)
    assert len(summary) == 1 and int(summary[0]) >= 1, log
