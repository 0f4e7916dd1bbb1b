"""The etcd key layout and JSON codecs of the cluster metadata: every value round-trips,
keys decode into the events the image applies, and damaged values are refused by name."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.cluster.metadata import (
    BrokerRegistration,
    MetadataImage,
    PartitionState,
    TopicAssignment,
)
from oncelog.cluster.metadata_codec import (
    MetadataKeys,
    decode_broker,
    decode_controller,
    decode_event,
    decode_partition,
    decode_topic,
    encode_broker,
    encode_controller,
    encode_partition,
    encode_topic,
    new_cluster_id,
)

KEYS = MetadataKeys("oncelog/")
ids = st.integers(min_value=0, max_value=2**31 - 1)
epochs = st.integers(min_value=-1, max_value=2**31 - 1)
topic_names = st.text("abcXYZ019._-", min_size=1, max_size=30)
text = st.text(max_size=20)

brokers = st.builds(
    BrokerRegistration, node_id=ids, host=text, port=st.integers(1, 65535),
    rack=st.none() | text, epoch=st.integers(1, 2**40), shutting_down=st.booleans(),
)
states = st.builds(
    PartitionState, leader=epochs, leader_epoch=epochs,
    isr=st.lists(ids, max_size=5).map(tuple), partition_epoch=epochs, controller_epoch=epochs,
    leader_broker_epoch=st.integers(-1, 2**40),
)
topics = st.builds(
    TopicAssignment, name=topic_names, topic_id=st.uuids(),
    replicas=st.lists(st.lists(ids, min_size=1, max_size=3).map(tuple), max_size=4).map(tuple),
    configs=st.dictionaries(text, text, max_size=3),
)


@given(brokers)
def test_broker_round_trip(broker: BrokerRegistration) -> None:
    assert decode_broker(encode_broker(broker), broker.epoch) == broker


@given(states)
def test_partition_round_trip(state: PartitionState) -> None:
    assert decode_partition(encode_partition(state)) == state


@given(topics)
def test_topic_round_trip(topic: TopicAssignment) -> None:
    assert decode_topic(encode_topic(topic)) == topic


@given(ids, epochs)
def test_controller_round_trip(node_id: int, epoch: int) -> None:
    assert decode_controller(encode_controller(node_id, epoch)) == (node_id, epoch)


def test_golden_values() -> None:
    assert encode_partition(PartitionState(2, 5, (2, 1), 7, 3, 40)) == (
        b'{"controller_epoch":3,"isr":[2,1],"leader":2,"leader_broker_epoch":40,'
        b'"leader_epoch":5,"partition_epoch":7}'
    )
    # a state written before the leader's broker epoch was recorded
    assert decode_partition(
        b'{"controller_epoch":3,"isr":[2,1],"leader":2,"leader_epoch":5,"partition_epoch":7}'
    ) == PartitionState(2, 5, (2, 1), 7, 3, -1)
    assert KEYS.partition("a.b", 3) == b"/oncelog/partitions/a.b/3"
    assert KEYS.partitions_of("a") == b"/oncelog/partitions/a/"
    assert KEYS.broker(7) == b"/oncelog/brokers/7"
    assert len(new_cluster_id()) == 22


@given(topic_names, st.integers(0, 10_000), states, st.integers(1, 2**40))
def test_partition_keys_decode_into_events(
    name: str, index: int, state: PartitionState, revision: int
) -> None:
    key = KEYS.partition(name, index)
    event = decode_event(KEYS, key, encode_partition(state), deleted=False,
                         create_revision=1, mod_revision=revision)
    assert event is not None and event.partition == (name, index)
    assert event.partition_state is not None
    assert (event.partition_state.state, event.partition_state.version) == (state, revision)
    gone = decode_event(KEYS, key, b"", deleted=True, create_revision=0, mod_revision=revision)
    assert gone is not None and gone.deleted and gone.partition == (name, index)


def test_events_build_an_image() -> None:
    image = MetadataImage()
    broker = BrokerRegistration(1, "h", 1)
    topic = TopicAssignment("t", uuid.uuid4(), ((1,),))
    puts = [
        (KEYS.broker(1), encode_broker(broker)),
        (KEYS.topic("t"), encode_topic(topic)),
        (KEYS.partition("t", 0), encode_partition(PartitionState(1, 0, (1,)))),
        (KEYS.controller, encode_controller(1, 4)),
        (KEYS.producer_id_block, b'{"next":1000}'),  # not part of the image
        (b"/other/brokers/1", b"ignored"),
    ]
    for revision, (key, value) in enumerate(puts, 2):
        event = decode_event(KEYS, key, value, deleted=False, create_revision=2,
                             mod_revision=revision)
        if event is not None:
            image.apply(event)
    assert image.brokers == {1: BrokerRegistration(1, "h", 1, epoch=2)}
    assert image.topics == {"t": topic} and image.leader("t", 0) == 1
    assert image.controller == (1, 4) and image.revision == 5
    deleted = decode_event(KEYS, KEYS.topic("t"), b"", deleted=True, create_revision=0,
                           mod_revision=9)
    assert deleted is not None
    image.apply(deleted)
    assert image.topics == {} and image.partitions == {}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (KEYS.broker(1), b"{", "brokers/1: not JSON"),
        (KEYS.broker(1), b'{"node_id":1}', "brokers/1: missing host, port"),
        (KEYS.partition("t", 0), b'{"leader":"x","leader_epoch":0,"isr":[],'
         b'"partition_epoch":0,"controller_epoch":0}', "leader must be an integer"),
        (KEYS.topic("t"), b'{"name":"t","topic_id":"nope","replicas":[]}', "bad topic_id"),
        (b"/oncelog/brokers/x", b"{}", "'x' is not a non-negative integer"),
    ],
)
def test_damaged_values_are_refused_by_key(key: bytes, value: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_event(KEYS, key, value, deleted=False, create_revision=1, mod_revision=1)


def test_the_prefix_is_normalized() -> None:
    assert MetadataKeys("/oncelog/") == MetadataKeys("oncelog") == KEYS
    with pytest.raises(ValueError):
        MetadataKeys("/")
