"""The ``oncelog`` command line without a broker: a refused flag is reported by the
innermost command (its usage, then a hint naming the right form), Kafka's action flags name
the sub-command, and no option is taken for a longer one it abbreviates."""

from __future__ import annotations

import pytest

from oncelog.cli.common import kafka_form
from oncelog.cli.main import build_parser, main


def refused(capsys: pytest.CaptureFixture[str], *words: str) -> list[str]:
    """stderr lines of a command line the parser refuses (exit status 2)."""
    with pytest.raises(SystemExit) as exit_:
        main(list(words))
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err.splitlines()


def test_a_refused_flag_prints_the_subcommands_usage_and_a_close_spelling(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "topics", "create", "--topc", "t")
    assert err[0].startswith("usage: oncelog topics create ")
    assert "oncelog topics create: error: unrecognized arguments: --topc" in err
    assert err[-1] == "oncelog topics create: hint: did you mean --topic?"


def test_a_flag_of_a_sibling_command_names_that_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "groups", "list", "--members")
    assert err[0].startswith("usage: oncelog groups list ")
    assert err[-1] == "oncelog groups list: hint: --members belongs to `oncelog groups describe`"


def test_a_kafka_flag_handled_elsewhere_names_the_oncelog_form(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "topics", "--alter", "--topic", "t", "--config", "a=b")
    assert err[0].startswith("usage: oncelog topics alter ")
    assert "oncelog configs --alter --topic T --add-config K=V" in err[-1]
    err = refused(capsys, "consume", "--topic", "t", "--formatter", "x.Y")
    assert "--formatter x.Y" in err[-2] and "--format json" in err[-1]


def test_an_unknown_flag_points_at_help_and_the_mapping(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "dump-log", "--files", "f.log", "--no-such-flag")
    assert err[-1] == ("oncelog dump-log: hint: `oncelog dump-log --help` lists its options; "
                       "docs/kafka-tools.md maps Kafka's tools and flags to oncelog's")


def test_options_are_not_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    """--formatter is not --formatter-config, nor --bootstrap --bootstrap-server."""
    refused(capsys, "consume", "--topic", "t", "--formatter", "x")
    refused(capsys, "topics", "list", "--bootstrap", "h:1")


@pytest.mark.parametrize(("words", "expected"), [
    (["topics", "--create", "--topic", "t"], ["topics", "create", "--topic", "t"]),
    (["topics", "--topic", "t", "--describe"], ["topics", "describe", "--topic", "t"]),
    (["topics", "create", "t"], ["topics", "create", "t"]),  # oncelog's own form
    (["groups", "--bootstrap-server", "h:1", "--reset-offsets", "--group", "g"],
     ["groups", "reset-offsets", "--bootstrap-server", "h:1", "--group", "g"]),
    (["acls", "--list"], ["acls", "list"]),
    (["txn", "--bootstrap-server", "h:1", "describe", "--transactional-id", "x"],
     ["txn", "describe", "--bootstrap-server", "h:1", "--transactional-id", "x"]),
])
def test_kafka_form_names_the_subcommand(words: list[str], expected: list[str]) -> None:
    from oncelog.cli import acls, groups, topics, txn

    modules = {"topics": topics, "groups": groups, "acls": acls, "txn": txn}
    module = modules[words[0]]
    assert kafka_form(build_parser(words[0]), words, getattr(module, "KAFKA_ACTIONS", {}),
                      leading_options=getattr(module, "KAFKA_LEADING_OPTIONS", False)
                      ) == expected


def test_two_action_flags_are_refused_with_the_commands_usage(
        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, "topics", "--create", "--delete", "--topic", "t")
    assert err[0].startswith("usage: oncelog topics ")
    assert err[-1] == ("oncelog topics: error: give one action, not --create and --delete: "
                       "the actions are --create, --delete, --list, --describe, --alter")
