"""Replication factors above 1 are refused on a single node and taken in cluster mode."""

from __future__ import annotations

import pytest

from oncelog.config import BrokerConfig


@pytest.mark.parametrize("name", ["default.replication.factor",
                                  "offsets.topic.replication.factor"])
def test_replication_factor_above_one_needs_cluster_mode(name: str) -> None:
    with pytest.raises(ValueError, match="larger than the 1 available broker"):
        BrokerConfig({name: "3"})
    config = BrokerConfig({name: "3", "metadata.etcd.endpoints": "127.0.0.1:2379"})
    assert config[name] == 3
