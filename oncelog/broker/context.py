"""The broker's services, as request handlers, the server and the metrics endpoint see them.

``BrokerContext`` is a small frozen object holding what a handler may reach: the broker
config, the clock, this node's identity, the partition registry, the group and transaction
coordinators, the producer-id allocator and the cluster view (``cluster``: who the
brokers are, who leads which partition and coordinator, topic administration; see
oncelog.broker.cluster_view). It is built once by ``Broker`` after start-up
(when the port is bound and the data directory is loaded) and handed to the server and the
metrics endpoint; handlers get it as ``ctx.services`` of their ``RequestContext``. Nothing
here knows ``Broker``, so handlers can be called over a context built by a test (a real
``PartitionRegistry`` in a tmp dir, fake or real coordinators) without sockets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oncelog.broker.cluster.elections import ClusterElections
    from oncelog.broker.cluster.replica_manager import ReplicaManager
    from oncelog.broker.cluster.txn_verifier import RemoteTxnVerifier
    from oncelog.broker.cluster_view import ClusterView
    from oncelog.broker.log_cleaner import LogCleaner
    from oncelog.broker.partitions import PartitionRegistry
    from oncelog.clock import Clock
    from oncelog.config import BrokerConfig
    from oncelog.coordinator.group.coordinator import GroupCoordinator
    from oncelog.coordinator.producer_ids import ProducerIdSource
    from oncelog.coordinator.transaction.coordinator import TransactionCoordinator
    from oncelog.security.acl_store import AclStore
    from oncelog.security.authorizer import Authorizer
    from oncelog.security.credentials import CredentialStore


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """Who this broker is to clients: its node id, the cluster it belongs to and the address
    it advertises in Metadata and FindCoordinator."""

    node_id: int
    cluster_id: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class BrokerContext:
    """The services a request handler may use (see the module docstring)."""

    config: BrokerConfig
    clock: Clock
    node: NodeIdentity
    partitions: PartitionRegistry
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    producer_ids: ProducerIdSource
    cluster: ClusterView
    # The leader's side of replication (cluster mode); None on a single node.
    replication: ReplicaManager | None = None
    cleaner: LogCleaner | None = None  # the log cleaner's per-partition status
    # Cluster mode: asks the transaction coordinator on another broker whether a produce
    # batch belongs to its transaction (KIP-890); None on a single node.
    txn_verifier: RemoteTxnVerifier | None = None
    # Cluster mode: ElectLeaders run by the controller (here or forwarded); None on one node.
    elections: ClusterElections | None = None
    # SCRAM credentials (SASL listeners, *UserScramCredentials); None: no SCRAM users.
    credentials: CredentialStore | None = None
    # ACLs (authorizer.class.name): None when no authorizer is configured (as Kafka:
    # everything is allowed, and the ACL APIs answer SECURITY_DISABLED).
    authorizer: Authorizer | None = None
    acls: AclStore | None = None
