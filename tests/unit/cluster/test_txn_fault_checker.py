"""The checker of the transactional fault run (tests/support/txn_workload.py): each anomaly
it must find, and an unknown-outcome transaction resolved all or nothing."""

from __future__ import annotations

from tests.support.txn_workload import (
    ABORTED,
    COMMITTED,
    UNKNOWN,
    Transaction,
    check_transactions,
)


def txn(seq: int, outcome: str, size: int = 2) -> Transaction:
    return Transaction(0, seq, [f"0:{seq}:{p}:0".encode() for p in range(size)], outcome)


def test_a_clean_run_has_no_anomaly() -> None:
    done = [txn(0, COMMITTED), txn(1, ABORTED), txn(2, UNKNOWN), txn(3, UNKNOWN)]
    committed = done[0].values + done[2].values
    counts = check_transactions(done, committed, committed + done[1].values)
    assert (counts[COMMITTED], counts[ABORTED], counts[UNKNOWN]) == (1, 1, 2)
    assert (counts["unknown_resolved_committed"], counts["unknown_resolved_aborted"]) == (1, 1)
    assert counts["aborted_values_in_log"] == 2
    assert all(counts[k] == 0 for k in ("duplicates", "lost_writes", "aborted_reads",
                                        "torn_transactions", "unexpected_values"))


def test_every_anomaly_is_counted() -> None:
    done = [txn(0, COMMITTED), txn(1, ABORTED), txn(2, UNKNOWN), txn(3, COMMITTED)]
    committed = [done[0].values[0],                    # lost + torn
                 done[1].values[0], done[1].values[1],  # aborted reads
                 done[2].values[0],                    # unknown, torn
                 done[3].values[0], done[3].values[0], done[3].values[1],  # a duplicate
                 b"9:9:9:9"]                           # written by no transaction
    counts = check_transactions(done, committed, committed)
    assert counts["lost_writes"] == 1
    assert counts["aborted_reads"] == 2
    assert counts["torn_transactions"] == 2 and counts["unknown_torn"] == 1
    assert counts["duplicates"] == 1
    assert counts["unexpected_values"] == 1
