"""Replication factors above 1 are refused on a single node and taken in cluster mode."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from oncelog.config import BrokerConfig


@pytest.mark.parametrize("name", ["default.replication.factor",
                                  "offsets.topic.replication.factor"])
def test_replication_factor_above_one_needs_cluster_mode(name: str) -> None:
    with pytest.raises(ValueError, match="larger than the 1 available broker"):
        BrokerConfig({name: "3"})
    config = BrokerConfig({name: "3", "metadata.etcd.endpoints": "127.0.0.1:2379"})
    assert config[name] == 3


def test_dev_cluster_passes_settings_to_every_broker(tmp_path: Path) -> None:
    from oncelog.cli.devcluster import broker_argv
    from oncelog.cli.main import build_parser

    args = build_parser().parse_args([
        "dev-cluster", "--port", "9300", "-c", "transaction.two.phase.commit.enable=true",
        "-c", "min.insync.replicas=2",
    ])
    for node_id in (1, 2, 3):
        argv = broker_argv(args, node_id, tmp_path)
        assert argv[argv.index("--listen") + 1] == f"127.0.0.1:{9299 + node_id}"
        settings = [argv[i + 1] for i, flag in enumerate(argv) if flag == "-c"]
        # The user's settings come last, so they win over the defaults dev-cluster sets.
        assert settings[-2:] == ["transaction.two.phase.commit.enable=true",
                                 "min.insync.replicas=2"]


def test_dev_cluster_help_says_how_to_restart_one_broker() -> None:
    from oncelog.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    text = sub.choices["dev-cluster"].format_help()
    assert "`broker N command:` line" in text and "kill -9 PID" in text
