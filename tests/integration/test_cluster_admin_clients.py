"""The partition and cluster admin APIs through real clients' own admin calls, against one
``oncelog serve`` (the session's ``shared_broker``; every test uses its own topics).

Each client is asked what a single-node Kafka answers: the cluster is this one node (id 1),
which is also the controller; a topic created with an explicit assignment naming this node
exists with it, and one naming another broker is refused (INVALID_REPLICA_ASSIGNMENT);
partitions added with an assignment get it; a preferred-leader election answers
ELECTION_NOT_NEEDED; no reassignment is in progress and one to this node alone is accepted;
the log directories hold the partitions. Clients: confluent-kafka (librdkafka), kafka-python,
aiokafka, oncelog.client, KafkaJS (tests/js/admin_runner.js) and the Java AdminClient
(kafka-clients 4.4, oncelog.harness.AdminProbe).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewPartitions as AioNewPartitions
from aiokafka.admin import NewTopic as AioNewTopic
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewPartitions as CkNewPartitions
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka import KafkaAdminClient
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import NewPartitions as KpNewPartitions
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import IncompatibleBrokerVersion

from oncelog.client import Admin, NewPartitions, NewTopic, TopicPartition
from oncelog.client.errors import KafkaClientError
from oncelog.errors import ErrorCode
from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import ReferenceKafkaMissing, require_reference, run_harness
from tests.support.kafkajs import KafkaJSAdmin, result_of
from tests.support.names import unique_topic

NODE = 1  # the node id of a default ``oncelog serve``
TIMEOUT_S = 30.0


def _wait_all(futures: dict[Any, Any]) -> dict[Any, Any]:
    """confluent-kafka: each future's result, or the KafkaException's error code."""
    out: dict[Any, Any] = {}
    for key, future in futures.items():
        try:
            out[key] = future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            out[key] = exc.args[0].code()
    return out


# -- confluent-kafka (librdkafka) -------------------------------------------------------------
def test_confluent_kafka_admin(shared_broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    # librdkafka wants the partition count with an assignment (it sends -1 on the wire).
    good, bad = unique_topic("ck-assign"), unique_topic("ck-bad")

    created = _wait_all(admin.create_topics([
        CkNewTopic(good, 2, replica_assignment=[[NODE], [NODE]]),
        CkNewTopic(bad, 1, replica_assignment=[[NODE + 1]]),
    ], operation_timeout=10))
    assert created == {good: None, bad: KafkaError.INVALID_REPLICA_ASSIGNMENT}

    grown = _wait_all(admin.create_partitions(
        [CkNewPartitions(good, 3, replica_assignment=[[NODE]])], operation_timeout=10))
    assert grown == {good: None}
    refused = _wait_all(admin.create_partitions(
        [CkNewPartitions(good, 4, replica_assignment=[[NODE + 5]])], operation_timeout=10))
    assert refused == {good: KafkaError.INVALID_REPLICA_ASSIGNMENT}

    cluster = admin.describe_cluster(request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    assert [n.id for n in cluster.nodes] == [NODE]
    assert cluster.controller.id == NODE
    assert cluster.cluster_id

    from confluent_kafka import TopicCollection

    described = admin.describe_topics(TopicCollection([good]), request_timeout=TIMEOUT_S)
    topic = described[good].result(timeout=TIMEOUT_S)
    assert [(p.id, p.leader.id, [r.id for r in p.replicas], [r.id for r in p.isr])
            for p in topic.partitions] == [(i, NODE, [NODE], [NODE]) for i in range(3)]

    from confluent_kafka import ElectionType

    elected = admin.elect_leaders(
        ElectionType.PREFERRED, [CkTopicPartition(good, 0), CkTopicPartition(good, 2)]
    ).result(timeout=TIMEOUT_S)
    assert {(tp.topic, tp.partition): (err.code() if err else None)
            for tp, err in elected.items()} == {
        (good, 0): KafkaError.ELECTION_NOT_NEEDED,
        (good, 2): KafkaError.ELECTION_NOT_NEEDED,
    }


# -- kafka-python ------------------------------------------------------------------------------
def test_kafka_python_admin(shared_broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
    try:
        good, bad = unique_topic("kp-assign"), unique_topic("kp-bad")
        response = admin.create_topics(
            [KpNewTopic(good, replica_assignments={0: [NODE], 1: [NODE]}),
             KpNewTopic(bad, replica_assignments={0: [NODE, NODE]})],
            raise_errors=False,
        )
        codes = {t["name"]: t["error_code"] for t in response["topics"]}
        assert codes == {good: 0, bad: ErrorCode.invalid_replica_assignment}
        admin.create_partitions({good: KpNewPartitions(3, [[NODE]])})

        cluster = admin.describe_cluster()
        # DescribeCluster (kafka-python falls back to Metadata only on older brokers).
        assert [b["broker_id"] for b in cluster["brokers"]] == [NODE]
        assert cluster["controller_id"] == NODE
        assert "ALTER" in {str(op).rsplit(".", 1)[-1] for op in cluster["authorized_operations"]}

        described = admin.describe_topic_partitions([good])
        (topic,) = described["topics"]
        assert [(p["partition_index"], p["leader_id"], p["replica_nodes"])
                for p in topic["partitions"]] == [(i, NODE, [NODE]) for i in range(3)]

        elected = admin.elect_leaders(0, {good: [0, 1]}, raise_errors=False)
        results = [(r[0], [(p[0], p[1]) for p in r[1]]) for r in elected.replica_election_results]
        assert results == [(good, [(0, ErrorCode.election_not_needed),
                                   (1, ErrorCode.election_not_needed)])]

        assert admin.list_partition_reassignments() == {}
        altered = admin.alter_partition_reassignments({KpTopicPartition(good, 0): [NODE]})
        assert altered == {KpTopicPartition(good, 0): None}

        (broker_dirs,) = admin.describe_log_dirs()
        assert broker_dirs["broker"] == NODE
        placed = {
            (t["name"], p["partition_index"])
            for r in broker_dirs["log_dirs"] for t in r["topics"] for p in t["partitions"]
            if t["name"] == good
        }
        assert placed == {(good, 0), (good, 1), (good, 2)}

        # Not served, as on a non-KRaft Kafka broker (docs/compatibility.md).
        with pytest.raises(IncompatibleBrokerVersion):
            admin.describe_metadata_quorum()
        with pytest.raises(IncompatibleBrokerVersion):
            admin.list_config_resources()
    finally:
        admin.close()


# -- aiokafka ----------------------------------------------------------------------------------
def test_aiokafka_admin(shared_broker: BrokerProcess) -> None:
    good, bad = unique_topic("aio-assign"), unique_topic("aio-bad")

    async def scenario() -> tuple[Any, ...]:
        admin = AIOKafkaAdminClient(bootstrap_servers=shared_broker.bootstrap)
        await admin.start()
        try:
            created = await admin.create_topics(
                [AioNewTopic(good, -1, -1, replica_assignments={0: [NODE]})])
            refused = await admin.create_topics(
                [AioNewTopic(bad, -1, -1, replica_assignments={0: [NODE + 1]})])
            grown = await admin.create_partitions({good: AioNewPartitions(2, [[NODE]])})
            cluster = await admin.describe_cluster()
            topics = await admin.describe_topics([good])
            return created, refused, grown, cluster, topics
        finally:
            await admin.close()

    created, refused, grown, cluster, topics = asyncio.run(scenario())
    assert [(t[0], t[1]) for t in created.topic_errors] == [(good, 0)]
    assert [(t[0], t[1]) for t in refused.topic_errors] == [
        (bad, ErrorCode.invalid_replica_assignment)
    ]
    assert [(t[0], t[1]) for t in grown.topic_errors] == [(good, 0)]
    assert [b["node_id"] for b in cluster["brokers"]] == [NODE]
    assert cluster["controller_id"] == NODE
    (topic,) = topics
    assert [(p["partition"], p["leader"], p["replicas"]) for p in topic["partitions"]] == [
        (0, NODE, [NODE]), (1, NODE, [NODE])
    ]


# -- oncelog.client ----------------------------------------------------------------------------
def test_oncelog_client_admin(shared_broker: BrokerProcess) -> None:
    good, bad = unique_topic("ol-assign"), unique_topic("ol-bad")
    with Admin({"bootstrap.servers": shared_broker.bootstrap}) as admin:
        created = admin.create_topics([
            NewTopic(good, replica_assignment={0: [NODE], 1: [NODE]}),
            NewTopic(bad, replica_assignment={0: [NODE + 1]}),
        ])
        assert created[good] is None
        refused = created[bad]
        assert isinstance(refused, KafkaClientError)
        assert refused.code == ErrorCode.invalid_replica_assignment

        assert admin.create_partitions({good: NewPartitions(3, [[NODE]])}) == {good: None}
        too_few = admin.create_partitions({good: NewPartitions(2)})[good]
        assert too_few is not None and too_few.code == ErrorCode.invalid_partitions

        cluster = admin.describe_cluster(include_authorized_operations=True)
        assert list(cluster.brokers) == [NODE]
        assert cluster.controller_id == NODE
        # No authorizer: every cluster operation Kafka defines for the cluster is allowed.
        assert cluster.authorized_operations is not None and cluster.authorized_operations

        elected = admin.elect_leaders([TopicPartition(good, 0), TopicPartition(good, 2)])
        assert {tp: e.code if e else None for tp, e in elected.items()} == {
            TopicPartition(good, 0): ErrorCode.election_not_needed,
            TopicPartition(good, 2): ErrorCode.election_not_needed,
        }
        unknown = admin.elect_leaders([TopicPartition(good, 9)])[TopicPartition(good, 9)]
        assert unknown is not None and unknown.code == ErrorCode.unknown_topic_or_partition

        assert admin.list_partition_reassignments() == {}
        altered = admin.alter_partition_reassignments({
            TopicPartition(good, 0): [NODE],
            TopicPartition(good, 1): [NODE + 1],
            TopicPartition(good, 2): None,
        })
        assert {tp: e.code if e else None for tp, e in altered.items()} == {
            TopicPartition(good, 0): None,
            TopicPartition(good, 1): ErrorCode.invalid_replica_assignment,
            TopicPartition(good, 2): ErrorCode.no_reassignment_in_progress,
        }

        dirs = admin.describe_log_dirs()
        assert list(dirs) == [NODE]
        replicas = {
            tp: info for d in dirs[NODE].values() for tp, info in d.replicas.items()
            if tp.topic == good
        }
        assert sorted(replicas) == [TopicPartition(good, i) for i in range(3)]
        assert all(info.size >= 0 and not info.is_future for info in replicas.values())
        assert all(d.error is None and d.total_bytes > 0 for d in dirs[NODE].values())


# -- KafkaJS -----------------------------------------------------------------------------------
def test_kafkajs_admin(shared_broker: BrokerProcess, kafkajs_admin: KafkaJSAdmin) -> None:
    good, bad = unique_topic("js-assign"), unique_topic("js-bad")
    assignment = [{"partition": 0, "replicas": [NODE]}, {"partition": 1, "replicas": [NODE]}]
    outcomes = kafkajs_admin(shared_broker.bootstrap, [
        {"op": "createTopics", "args": [{"topics": [
            {"topic": good, "replicaAssignment": assignment}]}]},
        {"op": "createTopics", "args": [{"topics": [
            {"topic": bad, "replicaAssignment": [{"partition": 0, "replicas": [NODE + 1]}]}]}]},
        {"op": "createPartitions", "args": [{"topicPartitions": [
            {"topic": good, "count": 3, "assignments": [[NODE]]}]}]},
        {"op": "describeCluster"},
        {"op": "fetchTopicMetadata", "args": [{"topics": [good]}]},
        {"op": "listPartitionReassignments", "args": [{}]},
        {"op": "alterPartitionReassignments", "args": [{"topics": [
            {"topic": good, "partitionAssignment": [{"partition": 0, "replicas": [NODE]}]}]}]},
        {"op": "fetchTopicOffsets", "args": [good]},
        {"op": "describeConfigs", "args": [{"resources": [{"type": 2, "name": good}],
                                             "includeSynonyms": False}]},
    ])
    created, refused, grown, cluster, metadata, listed, altered, offsets, configs = outcomes
    assert result_of(created) is True
    assert not refused["ok"]
    assert [e["type"] for e in refused["error"]["errors"]] == ["INVALID_REPLICA_ASSIGNMENT"]
    result_of(grown)
    described = result_of(cluster)
    assert [b["nodeId"] for b in described["brokers"]] == [NODE]
    assert described["controller"] == NODE
    (topic,) = result_of(metadata)["topics"]
    assert [(p["partitionId"], p["leader"], p["replicas"], p["isr"])
            for p in topic["partitions"]] == [(i, NODE, [NODE], [NODE]) for i in range(3)]
    assert result_of(listed) == {"topics": []}
    result_of(altered)
    assert sorted((o["partition"], o["low"], o["high"]) for o in result_of(offsets)) == [
        (i, "0", "0") for i in range(3)
    ]
    (resource,) = result_of(configs)["resources"]
    assert resource["errorCode"] == 0
    assert "retention.ms" in {e["configName"] for e in resource["configEntries"]}


# -- Java AdminClient (kafka-clients 4.4) ------------------------------------------------------
def admin_probe(bootstrap: str, operations: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run oncelog.harness.AdminProbe; one outcome per operation."""
    try:
        require_reference()
    except ReferenceKafkaMissing as exc:
        pytest.fail(f"Java harness unavailable: {exc}", pytrace=False)
    done = run_harness("AdminProbe", bootstrap, input=json.dumps(operations))
    assert done.returncode == 0, done.stderr
    outcomes: list[dict[str, Any]] = json.loads(done.stdout)
    assert len(outcomes) == len(operations)
    return outcomes


def ok(outcome: dict[str, Any]) -> Any:
    assert outcome["ok"], f"{outcome['op']}: {outcome.get('error')}"
    return outcome["result"]


def test_java_admin_client(shared_broker: BrokerProcess) -> None:
    good, bad = unique_topic("java-assign"), unique_topic("java-bad")
    outcomes = admin_probe(shared_broker.bootstrap, [
        {"op": "createTopics", "topics": [
            {"name": good, "assignments": {"0": [NODE], "1": [NODE]}},
            {"name": bad, "assignments": {"0": [NODE + 1]}},
        ]},
        {"op": "createPartitions", "topics": {good: {"count": 3, "assignments": [[NODE]]}}},
        {"op": "describeCluster", "authorizedOperations": True},
        {"op": "describeTopics", "topics": [good]},
        {"op": "electLeaders", "type": "PREFERRED", "partitions": [[good, 0], [good, 1]]},
        {"op": "listPartitionReassignments"},
        {"op": "alterPartitionReassignments", "reassignments": [
            {"topic": good, "partition": 0, "replicas": [NODE]},
            {"topic": good, "partition": 1, "replicas": [NODE + 1]},
        ]},
        {"op": "describeLogDirs", "brokers": [NODE]},
        {"op": "describeReplicaLogDirs", "replicas": [[good, 0, NODE]]},
        {"op": "describeConfigs", "resources": [{"type": "TOPIC", "name": good}]},
        {"op": "incrementalAlterConfigs", "resources": [{"type": "TOPIC", "name": good, "ops": [
            {"name": "retention.ms", "value": "3600000", "op": "SET"}]}]},
        {"op": "describeConfigs", "resources": [{"type": "TOPIC", "name": good}]},
        {"op": "deleteRecords", "records": [{"topic": good, "partition": 0, "offset": 0}]},
    ])
    (created, grown, cluster, topics, elected, listed, altered, log_dirs, replica_dirs,
     configs, alter_configs, configs_after, deleted) = outcomes

    created_by_topic = ok(created)
    assert created_by_topic[good] == {"ok": True, "value": None}
    assert created_by_topic[bad]["error"]["class"] == "InvalidReplicaAssignmentException"
    assert ok(grown) == {good: {"ok": True, "value": None}}

    described = ok(cluster)
    assert [n["id"] for n in described["nodes"]] == [NODE]
    assert described["controller"]["id"] == NODE
    assert "ALTER" in described["authorizedOperations"]

    topic = ok(topics)[good]["value"]
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"])
            for p in topic["partitions"]] == [(i, NODE, [NODE], [NODE]) for i in range(3)]

    assert {k: v["error"]["class"] for k, v in ok(elected).items()} == {
        f"{good}-0": "ElectionNotNeededException",
        f"{good}-1": "ElectionNotNeededException",
    }
    assert ok(listed) == {}
    by_partition = ok(altered)
    assert by_partition[f"{good}-0"] == {"ok": True, "value": None}
    assert by_partition[f"{good}-1"]["error"]["class"] == "InvalidReplicaAssignmentException"

    dirs = ok(log_dirs)[str(NODE)]
    holding = [path for path, d in dirs.items() if f"{good}-0" in d["replicas"]]
    assert len(holding) == 1 and dirs[holding[0]]["error"] is None
    assert dirs[holding[0]]["replicas"][f"{good}-0"]["isFuture"] is False
    replica = ok(replica_dirs)[f"{good}-0@{NODE}"]
    assert replica["ok"] and replica["value"]["currentDir"] == holding[0]
    assert replica["value"]["futureDir"] is None

    entries = ok(configs)[f"TOPIC:{good}"]["value"]
    assert entries["retention.ms"]["source"] == "DEFAULT_CONFIG"
    assert ok(alter_configs) == {f"TOPIC:{good}": {"ok": True, "value": None}}
    retention = ok(configs_after)[f"TOPIC:{good}"]["value"]["retention.ms"]
    assert (retention["value"], retention["source"]) == ("3600000", "DYNAMIC_TOPIC_CONFIG")
    assert ok(deleted) == {f"{good}-0": {"ok": True, "value": 0}}
