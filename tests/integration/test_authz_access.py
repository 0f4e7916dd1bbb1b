"""The read, group, metadata and admin authorization checks (issue 17) on a real
``oncelog serve`` with the StandardAuthorizer, over SASL_PLAINTEXT with a SCRAM user per row.

``test_check`` is the table: each row is an action of a real client (confluent-kafka's
consumer and AdminClient, oncelog.client's consumer and Admin), done first without the ACL
the row is about (Kafka's exact error, or what Kafka shows instead: a topic or group left out
of a listing, no authorized operations) and then with it granted through CreateAcls. The ACLs
the action needs on its way to the check (Describe on the topic for the consumer's Metadata,
Describe on the group for its FindCoordinator) are granted first, so each row fails when its
own check is broken.

``raw`` rows send one request over the raw protocol, logged in as the row's user, for what no
client sends (a follower's Fetch, AlterReplicaLogDirs) and for the checks a client always
reaches through another check on the same ACL (ListOffsets and OffsetForLeaderEpoch come after
a Metadata needing Describe on the topic; DescribeGroups, OffsetFetch, SyncGroup, Heartbeat and
LeaveGroup after a FindCoordinator or JoinGroup needing the same group ACL): their answer
without the ACL is Kafka's error, with it the next answer in Kafka's order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
)
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.admin import ResourceType as CKResource

from oncelog.client import Consumer as OncelogConsumer
from oncelog.client.admin import Admin
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from oncelog.security.acl import AclOperation, ResourceType
from tests.support.authz import (
    AuthzBroker,
    Names,
    admin_conf,
    authz_broker,
    error_name,
    outcome,
    password_of,
)

pytestmark = pytest.mark.integration

T = 30  # seconds any client call may take
POLLS = 30  # one-second polls a consumer may take to see its first record or error
NODE_ID = 1  # the broker's node.id (the default)
OP, RT = AclOperation, ResourceType


@pytest.fixture(scope="module")
def broker(request: pytest.FixtureRequest,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzBroker]:
    yield from authz_broker(request, tmp_path_factory,
                            **{"group.initial.rebalance.delay.ms": "0"})


def first_error(errors: dict[Any, Any]) -> None:
    """Raise the first error of a per-resource answer (None: success)."""
    for error in errors.values():
        if isinstance(error, KafkaError):
            raise KafkaException(error)
        if error is not None:
            raise error


def ck_admin(b: AuthzBroker, n: Names) -> AdminClient:
    return AdminClient(b.confluent(n.user))


def settled(b: AuthzBroker, n: Names, call: Callable[[AdminClient], Any], key: Any) -> str:
    """The outcome of the future for ``key`` of an AdminClient call as the row's user
    (the client lives until it is settled)."""
    admin = ck_admin(b, n)
    futures = call(admin)
    return outcome(lambda: futures[key].result(timeout=T))


# ----------------------------------------------------------------------- the actions
Action = Callable[[AuthzBroker, Names], str]


def fetch_confluent(b: AuthzBroker, n: Names) -> str:
    """A confluent-kafka consumer assigned the topic: its first record, or its error."""
    consumer = Consumer(b.confluent(n.user, **{"group.id": n.group,
                                               "enable.auto.commit": False}))
    try:
        consumer.assign([CKTopicPartition(n.topic, 0, 0)])
        for _ in range(POLLS):
            msg = consumer.poll(1)
            if msg is not None:
                return error_name(msg.error())
        return "NO_ANSWER"
    finally:
        consumer.close()


def _first_record(consumer: OncelogConsumer) -> None:
    for _ in range(POLLS):
        if consumer.poll(1):
            return
    raise AssertionError("no record came")


def fetch_oncelog(b: AuthzBroker, n: Names) -> str:
    """An oncelog.client consumer assigned the topic reads its record."""
    consumer = OncelogConsumer(b.oncelog(n.user, **{"auto.offset.reset": "earliest"}))
    try:
        consumer.assign([(n.topic, 0)])
        return outcome(lambda: _first_record(consumer))
    finally:
        consumer.close()


def join_oncelog(b: AuthzBroker, n: Names) -> str:
    """An oncelog.client consumer of a group: JoinGroup, SyncGroup, then its record."""
    consumer = OncelogConsumer(b.oncelog(n.user, **{"group.id": n.group,
                                                    "auto.offset.reset": "earliest"}))
    try:
        consumer.subscribe([n.topic])
        return outcome(lambda: _first_record(consumer))
    finally:
        consumer.close()


def commit_confluent(b: AuthzBroker, n: Names) -> str:
    consumer = Consumer(b.confluent(n.user, **{"group.id": n.group,
                                               "enable.auto.commit": False}))

    def commit() -> None:
        done = consumer.commit(offsets=[CKTopicPartition(n.topic, 0, 1)], asynchronous=False)
        for tp in done or ():
            if tp.error is not None:
                raise KafkaException(tp.error)

    try:
        return outcome(commit)
    finally:
        consumer.close()


def offsets_named(b: AuthzBroker, n: Names) -> str:
    """The group's committed offset of the topic (OffsetFetch naming it)."""
    wanted = ConsumerGroupTopicPartitions(n.group, [CKTopicPartition(n.topic, 0)])
    admin = ck_admin(b, n)
    future = admin.list_consumer_group_offsets([wanted])[n.group]

    def read() -> None:
        (tp,) = future.result(timeout=T).topic_partitions
        if tp.error is not None:
            raise KafkaException(tp.error)
        assert tp.offset == 1, tp

    return outcome(read)


def offsets_all(b: AuthzBroker, n: Names) -> str:
    """Every committed offset of the group: the topic's is there, or "HIDDEN"."""
    wanted = ConsumerGroupTopicPartitions(n.group)
    admin = ck_admin(b, n)
    found = admin.list_consumer_group_offsets([wanted])[n.group].result(timeout=T)
    return "NONE" if [tp.topic for tp in found.topic_partitions] == [n.topic] else "HIDDEN"


def list_groups(b: AuthzBroker, n: Names) -> str:
    admin = ck_admin(b, n)
    listed = admin.list_consumer_groups().result(timeout=T)
    assert not listed.errors, listed.errors
    return "NONE" if n.group in {g.group_id for g in listed.valid} else "HIDDEN"


def describe_groups(b: AuthzBroker, n: Names) -> str:
    return settled(b, n, lambda a: a.describe_consumer_groups([n.group]), n.group)


def delete_groups(b: AuthzBroker, n: Names) -> str:
    return settled(b, n, lambda a: a.delete_consumer_groups([n.group]), n.group)


def delete_offsets(b: AuthzBroker, n: Names) -> str:
    with Admin(b.oncelog(n.user)) as admin:
        return outcome(lambda: first_error(admin.delete_consumer_group_offsets(
            n.group, [TopicPartition(n.topic, 0)])))


def metadata_named(b: AuthzBroker, n: Names) -> str:
    return error_name(ck_admin(b, n).list_topics(n.topic, timeout=T).topics[n.topic].error)


def metadata_all(b: AuthzBroker, n: Names) -> str:
    return "NONE" if n.topic in ck_admin(b, n).list_topics(timeout=T).topics else "HIDDEN"


def metadata_auto_create(b: AuthzBroker, n: Names) -> str:
    """A producer's Metadata allows auto-creation (librdkafka's producer default)."""
    producer = Producer(b.confluent(n.user))
    return error_name(producer.list_topics(n.topic, timeout=T).topics[n.topic].error)


def create_topics(b: AuthzBroker, n: Names) -> str:
    return settled(b, n, lambda a: a.create_topics([NewTopic(n.topic, 1, 1)]), n.topic)


def delete_topics(b: AuthzBroker, n: Names) -> str:
    return settled(b, n, lambda a: a.delete_topics([n.topic]), n.topic)


def create_partitions(b: AuthzBroker, n: Names) -> str:
    return settled(b, n, lambda a: a.create_partitions([NewPartitions(n.topic, 2)]), n.topic)


def delete_records(b: AuthzBroker, n: Names) -> str:
    tp = CKTopicPartition(n.topic, 0, 1)
    return settled(b, n, lambda a: a.delete_records([tp]), tp)


def _config_call(method: str, rtype: CKResource, name: Callable[[Names], str],
                 **resource: Any) -> Action:
    def act(b: AuthzBroker, n: Names) -> str:
        config = ConfigResource(rtype, name(n), **resource)
        options = {} if method == "describe_configs" else {"validate_only": True}
        return settled(b, n, lambda a: getattr(a, method)([config], **options), config)
    return act


def _topic(n: Names) -> str:
    return n.topic


def _broker(n: Names) -> str:
    return str(NODE_ID)


RETENTION = [ConfigEntry("retention.ms", "600000",
                         incremental_operation=AlterConfigOpType.SET)]
BROKER_RETENTION = [ConfigEntry("log.retention.ms", "600000",
                                incremental_operation=AlterConfigOpType.SET)]


def elect_leaders(b: AuthzBroker, n: Names) -> str:
    admin = ck_admin(b, n)
    future = admin.elect_leaders(ElectionType.PREFERRED, [CKTopicPartition(n.topic, 0)])
    return outcome(lambda: first_error(future.result(timeout=T)))


def with_admin(call: Callable[[Admin, Names], Any]) -> Action:
    """An oncelog.client Admin call as the row's user."""
    def act(b: AuthzBroker, n: Names) -> str:
        with Admin(b.oncelog(n.user)) as admin:
            return outcome(lambda: call(admin, n))
    return act


def metadata_cluster_operations(b: AuthzBroker, n: Names) -> str:
    """confluent-kafka's describe_cluster: a Metadata request (v8-10) asking the cluster's
    authorized operations."""
    admin = ck_admin(b, n)
    found = admin.describe_cluster(include_authorized_operations=True).result(T)
    return "NONE" if found.authorized_operations else "NO_OPERATIONS"


def describe_cluster(b: AuthzBroker, n: Names) -> str:
    """oncelog.client's describe_cluster: the DescribeCluster request."""
    with Admin(b.oncelog(n.user)) as admin:
        found = admin.describe_cluster(include_authorized_operations=True)
    return "NONE" if found.authorized_operations else "NO_OPERATIONS"


def describe_scram(admin: Admin, n: Names) -> None:
    """oncelog.client's: librdkafka 2.16 aborts the process on the top-level error of a
    DescribeUserScramCredentials answer (it keeps a pointer to a stack copy of it)."""
    found = admin.describe_user_scram_credentials([n.user])[n.user]
    if isinstance(found, KafkaClientError):
        raise found


def alter_scram(b: AuthzBroker, n: Names) -> str:
    upsert = UserScramCredentialUpsertion(n.user, ScramCredentialInfo(
        ScramMechanism.SCRAM_SHA_512, 4096), password_of(n.user).encode())
    return settled(b, n, lambda a: a.alter_user_scram_credentials([upsert]), n.user)


def raw(build: Callable[[Names], Any], answer: Callable[[Any], int]) -> Action:
    """One request on a raw connection logged in as the row's user: the error code
    ``answer`` picks from the response."""
    def act(b: AuthzBroker, n: Names) -> str:
        conn = b.raw(n.user)
        try:
            return ErrorCode(answer(conn.request(build(n)))).name.upper()
        finally:
            conn.close()
    return act


def follower_fetch(n: Names) -> Any:
    partition = nested(api.FETCH, 12, "FetchPartition", partition=0, current_leader_epoch=-1,
                       fetch_offset=0, last_fetched_epoch=-1, log_start_offset=-1,
                       partition_max_bytes=1 << 20)
    return request(api.FETCH, 12, replica_id=NODE_ID + 1, max_wait=0, min_bytes=0,
                   max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
                   topics=(nested(api.FETCH, 12, "FetchTopic", topic=n.topic,
                                  partitions=(partition,)),),
                   forgotten_topics_data=(), rack_id="")


def list_offsets(n: Names) -> Any:
    partition = nested(api.LIST_OFFSETS, 7, "ListOffsetsPartition", partition_index=0,
                       current_leader_epoch=-1, timestamp=-1)
    return request(api.LIST_OFFSETS, 7, replica_id=-1, isolation_level=0, topics=(
        nested(api.LIST_OFFSETS, 7, "ListOffsetsTopic", name=n.topic,
               partitions=(partition,)),))


def offset_for_leader_epoch(n: Names) -> Any:
    partition = nested(api.OFFSET_FOR_LEADER_EPOCH, 4, "OffsetForLeaderPartition",
                       partition=0, current_leader_epoch=-1, leader_epoch=0)
    return request(api.OFFSET_FOR_LEADER_EPOCH, 4, replica_id=-1, topics=(
        nested(api.OFFSET_FOR_LEADER_EPOCH, 4, "OffsetForLeaderTopic", topic=n.topic,
               partitions=(partition,)),))


def find_coordinator(key_type: int) -> Callable[[Names], Any]:
    def build(n: Names) -> Any:
        return request(api.FIND_COORDINATOR, 4, key_type=key_type,
                       coordinator_keys=(n.txn if key_type else n.group,))
    return build


def sync_group(n: Names) -> Any:
    return request(api.SYNC_GROUP, 5, group_id=n.group, generation_id=1, member_id="m",
                   group_instance_id=None, protocol_type="consumer", protocol_name="range",
                   assignments=())


def heartbeat(n: Names) -> Any:
    return request(api.HEARTBEAT, 4, group_id=n.group, generation_id=1, member_id="m",
                   group_instance_id=None)


def leave_group(n: Names) -> Any:
    return request(api.LEAVE_GROUP, 4, group_id=n.group, members=(
        nested(api.LEAVE_GROUP, 4, "MemberIdentity", member_id="m", group_instance_id=None),))


def raw_describe_groups(n: Names) -> Any:
    return request(api.DESCRIBE_GROUPS, 5, groups=(n.group,),
                   include_authorized_operations=False)


def offset_fetch(n: Names) -> Any:
    return request(api.OFFSET_FETCH, 8, require_stable=False, groups=(
        nested(api.OFFSET_FETCH, 8, "OffsetFetchRequestGroup", group_id=n.group,
               topics=None),))


def describe_topic_partitions(n: Names) -> Any:
    return request(api.DESCRIBE_TOPIC_PARTITIONS, 0, response_partition_limit=100,
                   cursor=None, topics=(
                       nested(api.DESCRIBE_TOPIC_PARTITIONS, 0, "TopicRequest",
                              name=n.topic),))


def alter_replica_log_dirs(n: Names) -> Any:
    topic = nested(api.ALTER_REPLICA_LOG_DIRS, 2, "AlterReplicaLogDirTopic", name=n.topic,
                   partitions=(0,))
    return request(api.ALTER_REPLICA_LOG_DIRS, 2, dirs=(
        nested(api.ALTER_REPLICA_LOG_DIRS, 2, "AlterReplicaLogDir", path="/no/such/dir",
               topics=(topic,)),))


def partition_error(response: Any) -> int:
    """The one partition's error code of a topics -> partitions response."""
    topics = getattr(response, "responses", None) or response.topics
    return int(topics[0].partitions[0].error_code)


# ------------------------------------------------------------------------- the table
ACL = tuple[ResourceType, AclOperation]


@dataclass(frozen=True)
class Row:
    action: Action
    refused: str  # what the client sees without ``needs``
    needs: ACL  # the ACL the row is about
    given: tuple[ACL, ...] = ()  # granted first: what the action needs on its way
    allowed: str = "NONE"  # what it sees once ``needs`` is granted
    topic: bool = True  # the topic exists (one partition, one record)
    offsets: bool = False  # the group has a committed offset (1) on the topic


TAF, GAF, CAF = ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED",
                 "CLUSTER_AUTHORIZATION_FAILED")
TOPIC_DESCRIBE, GROUP_DESCRIBE = (RT.TOPIC, OP.DESCRIBE), (RT.GROUP, OP.DESCRIBE)

ROWS: dict[str, Row] = {
    # Fetch, ListOffsets, OffsetForLeaderEpoch
    "fetch/confluent": Row(fetch_confluent, TAF, (RT.TOPIC, OP.READ),
                           (TOPIC_DESCRIBE, (RT.GROUP, OP.READ))),
    "fetch/oncelog": Row(fetch_oncelog, TAF, (RT.TOPIC, OP.READ), (TOPIC_DESCRIBE,)),
    "fetch/follower-raw": Row(raw(follower_fetch, partition_error), TAF,
                              (RT.CLUSTER, OP.CLUSTER_ACTION)),
    "list-offsets/raw": Row(raw(list_offsets, partition_error), TAF, TOPIC_DESCRIBE),
    "offset-for-leader-epoch/raw": Row(raw(offset_for_leader_epoch, partition_error), TAF,
                                       TOPIC_DESCRIBE),
    "offset-for-leader-epoch/cluster-action-raw": Row(
        raw(offset_for_leader_epoch, partition_error), TAF, (RT.CLUSTER, OP.CLUSTER_ACTION)),
    # Metadata
    "metadata/named": Row(metadata_named, TAF, TOPIC_DESCRIBE),
    "metadata/listed": Row(metadata_all, "HIDDEN", TOPIC_DESCRIBE),
    "metadata/auto-create": Row(metadata_auto_create, TAF, (RT.TOPIC, OP.CREATE),
                                (TOPIC_DESCRIBE,), topic=False),
    "metadata/auto-create-cluster": Row(metadata_auto_create, TAF, (RT.CLUSTER, OP.CREATE),
                                        (TOPIC_DESCRIBE,), topic=False),
    # groups
    "find-coordinator/group-raw": Row(
        raw(find_coordinator(0), lambda r: r.coordinators[0].error_code), GAF,
        GROUP_DESCRIBE),
    "find-coordinator/txn-raw": Row(
        raw(find_coordinator(1), lambda r: r.coordinators[0].error_code),
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", (RT.TRANSACTIONAL_ID, OP.DESCRIBE)),
    "join-group/oncelog": Row(join_oncelog, GAF, (RT.GROUP, OP.READ),
                              ((RT.TOPIC, OP.READ), GROUP_DESCRIBE)),
    "sync-group/raw": Row(raw(sync_group, lambda r: r.error_code), GAF, (RT.GROUP, OP.READ),
                          allowed="UNKNOWN_MEMBER_ID"),
    "heartbeat/raw": Row(raw(heartbeat, lambda r: r.error_code), GAF, (RT.GROUP, OP.READ),
                         allowed="UNKNOWN_MEMBER_ID"),
    "leave-group/raw": Row(raw(leave_group, lambda r: r.error_code), GAF,
                           (RT.GROUP, OP.READ)),
    "offset-commit/group": Row(commit_confluent, GAF, (RT.GROUP, OP.READ),
                               (GROUP_DESCRIBE, (RT.TOPIC, OP.READ))),
    "offset-commit/topic": Row(commit_confluent, TAF, (RT.TOPIC, OP.READ),
                               ((RT.GROUP, OP.READ), TOPIC_DESCRIBE)),
    "offset-fetch/group-raw": Row(raw(offset_fetch, lambda r: r.groups[0].error_code), GAF,
                                  GROUP_DESCRIBE, offsets=True),
    "offset-fetch/topic-named": Row(offsets_named, TAF, TOPIC_DESCRIBE, (GROUP_DESCRIBE,),
                                    offsets=True),
    "offset-fetch/topic-all": Row(offsets_all, "HIDDEN", TOPIC_DESCRIBE, (GROUP_DESCRIBE,),
                                  offsets=True),
    "list-groups/group": Row(list_groups, "HIDDEN", GROUP_DESCRIBE, offsets=True),
    "list-groups/cluster": Row(list_groups, "HIDDEN", (RT.CLUSTER, OP.DESCRIBE),
                               offsets=True),
    "describe-groups/confluent": Row(describe_groups, GAF, GROUP_DESCRIBE, offsets=True),
    "describe-groups/raw": Row(raw(raw_describe_groups, lambda r: r.groups[0].error_code),
                               GAF, GROUP_DESCRIBE, offsets=True),
    "delete-groups": Row(delete_groups, GAF, (RT.GROUP, OP.DELETE), (GROUP_DESCRIBE,),
                         offsets=True),
    "offset-delete/group": Row(delete_offsets, GAF, (RT.GROUP, OP.DELETE),
                               (GROUP_DESCRIBE, (RT.TOPIC, OP.READ)), offsets=True),
    "offset-delete/topic": Row(delete_offsets, TAF, (RT.TOPIC, OP.READ),
                               ((RT.GROUP, OP.DELETE), TOPIC_DESCRIBE), offsets=True),
    # topic administration
    "create-topics/topic": Row(create_topics, TAF, (RT.TOPIC, OP.CREATE), topic=False),
    "create-topics/cluster": Row(create_topics, TAF, (RT.CLUSTER, OP.CREATE), topic=False),
    "delete-topics": Row(delete_topics, TAF, (RT.TOPIC, OP.DELETE), (TOPIC_DESCRIBE,)),
    "create-partitions": Row(create_partitions, TAF, (RT.TOPIC, OP.ALTER), (TOPIC_DESCRIBE,)),
    "delete-records": Row(delete_records, TAF, (RT.TOPIC, OP.DELETE), (TOPIC_DESCRIBE,)),
    "describe-topic-partitions/raw": Row(
        raw(describe_topic_partitions, lambda r: r.topics[0].error_code), TAF,
        TOPIC_DESCRIBE),
    # configs
    "describe-configs/topic": Row(_config_call("describe_configs", CKResource.TOPIC,
                                               _topic), TAF, (RT.TOPIC, OP.DESCRIBE_CONFIGS)),
    "describe-configs/broker": Row(_config_call("describe_configs",
                                                CKResource.BROKER, _broker), CAF,
                                   (RT.CLUSTER, OP.DESCRIBE_CONFIGS), topic=False),
    "incremental-alter-configs/topic": Row(
        _config_call("incremental_alter_configs", CKResource.TOPIC, _topic,
                     incremental_configs=RETENTION), TAF, (RT.TOPIC, OP.ALTER_CONFIGS)),
    "incremental-alter-configs/broker": Row(
        _config_call("incremental_alter_configs", CKResource.BROKER, _broker,
                     incremental_configs=BROKER_RETENTION), CAF,
        (RT.CLUSTER, OP.ALTER_CONFIGS), topic=False),
    "alter-configs/topic": Row(
        _config_call("alter_configs", CKResource.TOPIC, _topic,
                     set_config={"retention.ms": "600000"}), TAF,
        (RT.TOPIC, OP.ALTER_CONFIGS)),
    # the cluster
    "elect-leaders": Row(elect_leaders, CAF, (RT.CLUSTER, OP.ALTER), (TOPIC_DESCRIBE,),
                         allowed="ELECTION_NOT_NEEDED"),
    "list-partition-reassignments": Row(
        with_admin(lambda admin, n: admin.list_partition_reassignments()), CAF,
        (RT.CLUSTER, OP.DESCRIBE), topic=False),
    "alter-partition-reassignments": Row(
        with_admin(lambda admin, n: first_error(admin.alter_partition_reassignments(
            {TopicPartition(n.topic, 0): [NODE_ID]}))), CAF, (RT.CLUSTER, OP.ALTER)),
    "describe-log-dirs": Row(with_admin(lambda admin, n: admin.describe_log_dirs()), CAF,
                             (RT.CLUSTER, OP.DESCRIBE), topic=False),
    "alter-replica-log-dirs/raw": Row(raw(alter_replica_log_dirs, lambda r: r.results[0]
                                          .partitions[0].error_code), CAF,
                                      (RT.CLUSTER, OP.ALTER), allowed="LOG_DIR_NOT_FOUND"),
    # Create on the cluster alone: still no operations without Describe (Kafka answers 0)
    "describe-cluster": Row(describe_cluster, "NO_OPERATIONS", (RT.CLUSTER, OP.DESCRIBE),
                            ((RT.CLUSTER, OP.CREATE),), topic=False),
    "metadata/cluster-operations": Row(metadata_cluster_operations, "NO_OPERATIONS",
                                       (RT.CLUSTER, OP.DESCRIBE), ((RT.CLUSTER, OP.CREATE),),
                                       topic=False),
    "describe-user-scram-credentials": Row(with_admin(describe_scram), CAF,
                                           (RT.CLUSTER, OP.DESCRIBE), topic=False),
    "alter-user-scram-credentials": Row(alter_scram, CAF, (RT.CLUSTER, OP.ALTER),
                                        topic=False),
}


def prepare(b: AuthzBroker, n: Names, row: Row) -> None:
    """As the super user: the row's topic with one record, its group's committed offset."""
    if not row.topic:
        return
    b.admin.create_topic(n.topic, 1)
    producer = Producer(admin_conf(b))
    producer.produce(n.topic, b"v", partition=0)
    assert producer.flush(T) == 0
    if row.offsets:
        committed = ConsumerGroupTopicPartitions(n.group, [CKTopicPartition(n.topic, 0, 1)])
        admin = AdminClient(admin_conf(b))
        admin.alter_consumer_group_offsets([committed])[n.group].result(timeout=T)


@pytest.mark.parametrize("row_id", ROWS)
def test_check(broker: AuthzBroker, row_id: str) -> None:
    row = ROWS[row_id]
    n = Names(broker.user())
    prepare(broker, n, row)
    for rtype, operation in row.given:
        broker.grant(n.user, rtype, n.resource(rtype), operation)
    assert row.action(broker, n) == row.refused
    rtype, operation = row.needs
    broker.grant(n.user, rtype, n.resource(rtype), operation)
    assert row.action(broker, n) == row.allowed


def test_denials_are_audited_without_secrets(broker: AuthzBroker) -> None:
    """A refused request writes Kafka's audit line (principal, operation, resource); the
    user's password is nowhere in the log."""
    n = Names(broker.user())
    prepare(broker, n, ROWS["metadata/named"])
    assert metadata_named(broker, n) == TAF
    log = broker.process.log_text()
    assert (f"Principal = User:{n.user} is Denied operation = DESCRIBE from host = "
            in log)
    assert f"on resource = TOPIC:LITERAL:{n.topic}" in log
    assert password_of(n.user) not in log
