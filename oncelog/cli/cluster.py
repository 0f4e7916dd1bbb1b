"""``oncelog cluster``: the brokers, the active controller and the under-replicated
partitions (DescribeCluster + Metadata), like ``kafka-metadata-quorum.sh`` /
``kafka-topics.sh --under-replicated-partitions`` together."""

from __future__ import annotations

import argparse

from oncelog.cli.common import (
    connection_options,
    node_ids,
    open_admin,
    print_table,
    run_command,
)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("cluster", parents=[connection_options()],
                       help="brokers, controller and under-replicated partitions")
    p.set_defaults(handler=cmd_cluster)


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, "cluster")


def cmd_cluster(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        cluster = admin.describe_cluster()
        described = admin.describe_topics(None)
    print(f"Cluster id: {cluster.cluster_id}")
    print(f"Controller: {cluster.controller_id}")
    print_table(
        ("Broker", "Host", "Port", "Controller"),
        [(node, host, port, "yes" if node == cluster.controller_id else "")
         for node, (host, port) in sorted(cluster.brokers.items())],
    )
    under = [
        (name, index, leader, node_ids(d.replicas.get(index, ())), node_ids(d.isr.get(index, ())))
        for name, d in sorted(described.items())
        for index, leader in d.leaders.items()
        if len(d.isr.get(index, ())) < len(d.replicas.get(index, ()))
    ]
    print(f"Under-replicated partitions: {len(under)}")
    if under:
        print_table(("Topic", "Partition", "Leader", "Replicas", "Isr"), under)
    return 0
