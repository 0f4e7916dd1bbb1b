"""The cluster's I/O shells: the broker's metadata cache, the elected controller, replica
management and fetching (the decisions they apply are sans-IO, in oncelog.cluster)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oncelog.config import BrokerConfig

__all__ = ["cluster_mode"]


def cluster_mode(config: BrokerConfig) -> bool:
    """Whether the broker runs in a cluster (``metadata.etcd.endpoints`` set)."""
    return bool(config["metadata.etcd.endpoints"])
