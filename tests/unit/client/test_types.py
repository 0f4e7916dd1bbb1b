from __future__ import annotations

import pytest

from oncelog.client.types import PreparedTxnState, TopicPartition


def test_prepared_state_round_trips_through_str() -> None:
    state = PreparedTxnState(producer_id=4242, epoch=17)
    text = str(state)
    assert text == "4242:17"
    again = PreparedTxnState(text)
    assert again == state
    assert (again.producer_id, again.epoch) == (4242, 17)
    assert hash(again) == hash(state)


def test_empty_state_means_no_transaction() -> None:
    assert str(PreparedTxnState()) == ""
    assert PreparedTxnState("") == PreparedTxnState()
    assert not PreparedTxnState().has_transaction
    assert PreparedTxnState("1:0").has_transaction


def test_states_differ_by_epoch_and_id() -> None:
    assert PreparedTxnState("1:2") != PreparedTxnState("1:3")
    assert PreparedTxnState("1:2") != PreparedTxnState("2:2")


@pytest.mark.parametrize("bad", ["12", "a:b", "1:", ":1", "-1:0", "1:-1", "1:40000", "1:2:3"])
def test_malformed_state_is_rejected(bad: str) -> None:
    with pytest.raises(ValueError):
        PreparedTxnState(bad)


def test_topic_partition_str() -> None:
    assert str(TopicPartition("orders", 3)) == "orders-3"
