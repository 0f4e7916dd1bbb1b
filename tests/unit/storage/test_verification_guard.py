"""KIP-890 verification guards in a partition's producer state (Kafka's VerificationGuard,
VerificationStateEntry and UnifiedLog.analyzeAndValidateProducerState): a transaction's
first transactional batch must present the guard taken before the coordinator was asked;
a marker or transactional batch of the producer in between removes it."""

from __future__ import annotations

import pytest

from oncelog.clock import FakeClock
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.producer_state import ProducerStateManager
from oncelog.storage.verification import SENTINEL, VerificationGuard
from tests.unit.storage.test_producer_state import NOW, batch

PID = 7


def manager(verification: bool = True) -> ProducerStateManager:
    return ProducerStateManager("t-0", FakeClock(NOW), 1000,
                                transaction_verification=verification)


def refused(m: ProducerStateManager, guard: VerificationGuard, offset: int = 0) -> ErrorCode:
    with pytest.raises(KafkaError) as exc:
        m.check(batch(pid=PID, txn=True, offset=offset), verification_guard=guard)
    return exc.value.code


def test_guards_are_unique_and_the_sentinel_verifies_nothing() -> None:
    a, b = VerificationGuard(), VerificationGuard()
    assert a.verify(a) and not a.verify(b)
    assert not SENTINEL.verify(SENTINEL) and not a.verify(SENTINEL)


def test_the_first_transactional_batch_needs_the_current_guard() -> None:
    m = manager()
    assert refused(m, SENTINEL) == ErrorCode.invalid_txn_state
    guard = m.maybe_start_verification(PID, 0)
    assert m.maybe_start_verification(PID, 0) is guard  # one verification at a time
    assert m.check(batch(pid=PID, txn=True), verification_guard=guard) is None
    m.update(batch(pid=PID, txn=True))
    # The transaction is open here now: no guard for its next batches, and none is kept.
    assert m.verification_guard(PID) is SENTINEL
    assert m.maybe_start_verification(PID, 0) is SENTINEL
    assert m.check(batch(pid=PID, txn=True, seq=1, offset=1)) is None


def test_a_marker_between_verification_and_append_refuses_the_append() -> None:
    m = manager()
    guard = m.maybe_start_verification(PID, 0)
    m.update_end_txn_marker(PID, 0, 0, offset=0, timestamp=NOW, is_abort=True)
    assert refused(m, guard, offset=1) == ErrorCode.invalid_txn_state
    # ABA: a new verification after the marker gets a new guard; the stale one stays refused.
    fresh = m.maybe_start_verification(PID, 0)
    assert fresh != guard
    assert refused(m, guard, offset=1) == ErrorCode.invalid_txn_state
    assert m.check(batch(pid=PID, txn=True, offset=1), verification_guard=fresh) is None


def test_a_coordinator_append_is_guarded_too() -> None:
    """The group coordinator's TxnOffsetCommit batch (Kafka's AppendOrigin.COORDINATOR)."""
    m = manager()
    header = batch(pid=PID, txn=True, seq=-1, offset=3)
    with pytest.raises(KafkaError) as exc:
        m.check(header, is_from_client=False)
    assert exc.value.code == ErrorCode.invalid_txn_state
    guard = m.maybe_start_verification(PID, 0)
    assert m.check(header, is_from_client=False, verification_guard=guard) is None


def test_an_older_epoch_is_fenced_before_any_guard() -> None:
    m = manager()
    m.update_end_txn_marker(PID, 3, 0, offset=0, timestamp=NOW, is_abort=True)
    with pytest.raises(KafkaError) as exc:
        m.maybe_start_verification(PID, 2)
    assert exc.value.code == ErrorCode.invalid_producer_epoch
    # A transaction open at an older epoch does not spare a newer epoch its verification.
    m.update(batch(pid=PID, epoch=3, txn=True, offset=1))
    assert m.maybe_start_verification(PID, 3) is SENTINEL
    assert m.maybe_start_verification(PID, 4) is not SENTINEL


def test_unused_verifications_expire_with_producers() -> None:
    clock = FakeClock(NOW)
    m = ProducerStateManager("t-0", clock, 1000, transaction_verification=True)
    guard = m.maybe_start_verification(PID, 0)
    m.remove_expired(NOW + 999)
    assert m.verification_guard(PID) is guard
    m.remove_expired(NOW + 1000)
    assert m.verification_guard(PID) is SENTINEL


def test_without_verification_nothing_is_required() -> None:
    m = manager(verification=False)
    assert m.check(batch(pid=PID, txn=True)) is None
