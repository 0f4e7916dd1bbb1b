"""The checker over hand-built histories: each anomaly class found, with the operations
that show it, and a clean history (committed, aborted and unknown transactions, a
consume-transform-produce chain, Kafka's legal ww/wr interleaving) with none."""

from __future__ import annotations

from oncelog.verify.checker import MAX_EXAMPLES, check
from oncelog.verify.history import FAIL, UNKNOWN, Fault
from tests.unit.verify.verify_helpers import IN0, IN1, OUT0, OUT1, found, history, op


def test_clean_history_has_no_anomaly() -> None:
    ops = [
        # p1#0 commits a fresh input and a fresh output
        op(1, 0, 0, 1, sends=[(IN0, "1.0.0", 0), (OUT0, "1.0.1", 0)]),
        # p2#0 aborts: its records stay in the log at offsets the final read skips
        op(2, 0, 0, 1, FAIL, sends=[(IN0, "2.0.0", 2), (IN1, "2.0.1", 0)]),
        # p3#0 transforms p1's input (skipping p2's aborted record is no poll-skip)
        op(3, 0, 2, 3, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 2)],
           offsets={IN0: 1}),
        # unknown, committed (visible), and unknown, aborted (killed before the commit)
        op(4, 0, 2, None, UNKNOWN, sends=[(OUT0, "4.0.0", 4)]),
        op(5, 0, 2, None, UNKNOWN, sends=[(OUT0, "5.0.0", None)]),
        # Kafka's legal interleaving: p6 sends to in/0 before p7 does; p7 commits its
        # in/1 record, which p6 then polls and transforms before committing: ww p6 -> p7
        # and wr p7 -> p6, but the ww edge orders sends, not commits
        op(6, 0, 4, 7, polls=[{IN1: [(2, "7.0.1")]}], sends=[(IN0, "6.0.0", 4),
           (OUT1, "x:7.0.1", 0)], offsets={IN1: 3}),
        op(7, 0, 4, 5, sends=[(IN0, "7.0.0", 5), (IN1, "7.0.1", 2)]),
    ]
    final = {
        IN0: [(0, "1.0.0"), (4, "6.0.0"), (5, "7.0.0")],
        IN1: [(2, "7.0.1")],
        OUT0: [(0, "1.0.1"), (2, "x:1.0.0"), (4, "4.0.0")],
        OUT1: [(0, "x:7.0.1")],
    }
    h = history(ops, final, committed={IN0: 1, IN1: 3})
    h.faults.append(Fault("kill", "broker-0", 1.5, 2.5))
    results = check(h)
    assert found(results) == {}
    assert results.valid
    assert results.totals == {
        "ops": 7, "txns": {"ok": 4, "fail": 1, "unknown": 2}, "sends": 11,
        "polled_records": 2, "faults": {"kill": 1}, "final_records": 8, "duration_s": 10.0,
        "clients": {"oncelog": 7}, "anomaly_counts": {},
    }


def test_duplicate() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(1, "1.0.0")]}])]
    results = check(history(ops, {OUT0: [(0, "1.0.0"), (1, "1.0.0")]}))
    assert found(results) == {"duplicate": [{0, 1}]}
    assert not results.valid
    assert "offsets [0, 1]" in results.anomalies["duplicate"][0].explanation


def test_inconsistent_offset() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(0, "9.9.9")]}])]
    results = check(history(ops, {OUT0: [(0, "1.0.0")]}))
    assert found(results) == {"inconsistent-offset": [{0, 1}]}
    assert results.anomalies["inconsistent-offset"][0].offset == 0


def test_aborted_read() -> None:
    ops = [op(1, 0, 0, 1, FAIL, sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(0, "1.0.0")]}])]
    results = check(history(ops, {OUT0: []}))
    assert found(results) == {"aborted-read": [{0, 1}]}


def test_aborted_read_in_the_final_read_only() -> None:
    ops = [op(1, 0, 0, 1, FAIL, sends=[(OUT0, "1.0.0", 0)])]
    assert found(check(history(ops, {OUT0: [(0, "1.0.0")]}))) == {"aborted-read": [{0}]}


def test_unknown_outcome_is_never_an_aborted_read() -> None:
    ops = [op(1, 0, 0, None, UNKNOWN, sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(0, "1.0.0")]}])]
    assert found(check(history(ops, {OUT0: [(0, "1.0.0")]}))) == {}


def test_torn_transaction() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0), (OUT1, "1.0.1", 0)])]
    results = check(history(ops, {OUT0: [(0, "1.0.0")], OUT1: []}))
    assert found(results) == {"torn-transaction": [{0}]}
    assert results.anomalies["torn-transaction"][0].value == "1.0.1"


def test_torn_unknown_transaction() -> None:
    ops = [op(1, 0, 0, None, UNKNOWN, sends=[(OUT0, "1.0.0", 0), (OUT1, "1.0.1", None)])]
    assert found(check(history(ops, {OUT0: [(0, "1.0.0")], OUT1: []}))) == {
        "torn-transaction": [{0}]}


def test_lost_write() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 2, 3, sends=[(OUT0, "2.0.0", 1)])]
    results = check(history(ops, {OUT0: [(1, "2.0.0")]}))
    assert found(results) == {"lost-write": [{0}]}
    assert results.anomalies["lost-write"][0].offset == 0


def test_lost_write_of_an_unknown_transaction_that_a_poll_proved_committed() -> None:
    ops = [op(1, 0, 0, None, UNKNOWN, sends=[(OUT0, "1.0.0", None)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(0, "1.0.0")]}], sends=[(OUT0, "2.0.0", 1)])]
    assert found(check(history(ops, {OUT0: [(1, "2.0.0")]}))) == {"lost-write": [{0}]}


def test_unseen_write() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", None)])]
    assert found(check(history(ops, {OUT0: []}))) == {"unseen-write": [{0}]}


def test_nonmonotonic_poll() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0), (OUT0, "1.0.1", 1)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(0, "1.0.0"), (1, "1.0.1")]}]),
           op(2, 1, 4, 5, polls=[{OUT0: [(0, "1.0.0")]}])]
    results = check(history(ops, {OUT0: [(0, "1.0.0"), (1, "1.0.1")]}))
    assert found(results) == {"nonmonotonic-poll": [{1, 2}]}


def test_a_new_session_may_poll_again_from_the_start() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0), (OUT0, "1.0.1", 1)]),
           op(2, 0, 2, 3, FAIL, polls=[{OUT0: [(0, "1.0.0"), (1, "1.0.1")]}]),
           op(2, 1, 4, 5, polls=[{OUT0: [(0, "1.0.0")]}], session=1)]
    assert found(check(history(ops, {OUT0: [(0, "1.0.0"), (1, "1.0.1")]}))) == {}


def test_poll_skip() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 0), (OUT0, "1.0.1", 2), (OUT0, "1.0.2", 4)]),
           op(2, 0, 2, 3, polls=[{OUT0: [(0, "1.0.0")]}]),
           op(2, 1, 4, 5, polls=[{OUT0: [(4, "1.0.2")]}])]
    final = {OUT0: [(0, "1.0.0"), (2, "1.0.1"), (4, "1.0.2")]}
    results = check(history(ops, final))
    assert found(results) == {"poll-skip": [{1, 2}]}
    assert results.anomalies["poll-skip"][0].value == "1.0.1"
    # a gap of aborted records and markers (absent from the final read) is no skip
    final[OUT0].pop(1)
    ops[0].sends.pop(1)
    assert found(check(history(ops, final))) == {}


def test_nonmonotonic_send() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", 5)]),
           op(1, 1, 2, 3, sends=[(OUT0, "1.1.0", 3)])]
    results = check(history(ops, {OUT0: [(3, "1.1.0"), (5, "1.0.0")]}))
    assert found(results) == {"nonmonotonic-send": [{0, 1}]}


def test_ctp_duplicate_two_outputs_of_one_input() -> None:
    ops = [op(1, 0, 0, 1, sends=[(IN0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 0)]),
           op(3, 0, 2, 3, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 1)])]
    final = {IN0: [(0, "1.0.0")], OUT0: [(0, "x:1.0.0"), (1, "x:1.0.0")]}
    results = check(history(ops, final, committed={IN0: 1}))
    # the same derived value at two offsets is also a duplicate, by construction
    assert found(results) == {"ctp-duplicate": [{1, 2}], "duplicate": [{1, 2}]}


def test_ctp_duplicate_output_above_the_committed_offset() -> None:
    ops = [op(1, 0, 0, 1, sends=[(IN0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 0)])]
    final = {IN0: [(0, "1.0.0")], OUT0: [(0, "x:1.0.0")]}
    results = check(history(ops, final, committed={IN0: 0}))
    assert found(results) == {"ctp-duplicate": [{1}]}
    assert "transformed again" in results.anomalies["ctp-duplicate"][0].explanation


def test_ctp_lost() -> None:
    ops = [op(1, 0, 0, 1, sends=[(IN0, "1.0.0", 0), (IN0, "1.0.1", 1)])]
    final = {IN0: [(0, "1.0.0"), (1, "1.0.1")], OUT0: []}
    results = check(history(ops, final, committed={IN0: 1}))  # 1.0.1 is not committed
    assert found(results) == {"ctp-lost": [{0}]}
    assert results.anomalies["ctp-lost"][0].value == "1.0.0"


def test_g1c_wr_cycle() -> None:
    ops = [op(1, 0, 0, 3, polls=[{OUT1: [(0, "2.0.0")]}], sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 0, 3, polls=[{OUT0: [(0, "1.0.0")]}], sends=[(OUT1, "2.0.0", 0)])]
    results = check(history(ops, {OUT0: [(0, "1.0.0")], OUT1: [(0, "2.0.0")]}))
    assert found(results) == {"G1c": [{0, 1}]}
    assert not results.valid
    assert "wr: p2#0 polled p1#0's '1.0.0'" in results.anomalies["G1c"][0].explanation


def test_g1c_through_a_realtime_ordered_ww_edge() -> None:
    # p1 committed before p2 began, and p2's record follows p1's: ww p1 -> p2 orders
    # their commits; p1 polling p2's record (wr p2 -> p1) closes an impossible cycle
    ops = [op(1, 0, 0, 1, polls=[{OUT1: [(0, "2.0.1")]}], sends=[(OUT0, "1.0.0", 0)]),
           op(2, 0, 2, 3, sends=[(OUT0, "2.0.0", 1), (OUT1, "2.0.1", 0)])]
    final = {OUT0: [(0, "1.0.0"), (1, "2.0.0")], OUT1: [(0, "2.0.1")]}
    assert found(check(history(ops, final))) == {"G1c": [{0, 1}]}


def test_kafka_legal_ww_wr_interleaving_is_not_g1c() -> None:
    # T1 sends to out/0 (offset 10), T2 sends to out/0 (11) and out/1 and commits, T1
    # polls out/1, sees T2's record, and commits: legal, though ww T1->T2 + wr T2->T1
    ops = [op(1, 0, 0, 5, polls=[{OUT1: [(0, "2.0.1")]}], sends=[(OUT0, "1.0.0", 10)]),
           op(2, 0, 1, 3, sends=[(OUT0, "2.0.0", 11), (OUT1, "2.0.1", 0)])]
    final = {OUT0: [(10, "1.0.0"), (11, "2.0.0")], OUT1: [(0, "2.0.1")]}
    results = check(history(ops, final))
    assert found(results) == {}
    assert results.valid


def test_g0_is_reported_but_valid() -> None:
    ops = [op(1, 0, 0, 3, sends=[(OUT0, "1.0.0", 0), (OUT1, "1.0.1", 1)]),
           op(2, 0, 0, 3, sends=[(OUT0, "2.0.0", 1), (OUT1, "2.0.1", 0)])]
    final = {OUT0: [(0, "1.0.0"), (1, "2.0.0")], OUT1: [(0, "2.0.1"), (1, "1.0.1")]}
    results = check(history(ops, final))
    assert found(results) == {"G0": [{0, 1}]}
    assert results.valid


def test_final_read_incomplete() -> None:
    ops = [op(1, 0, 0, 1, sends=[(OUT0, "1.0.0", None)])]
    results = check(history(ops, {OUT0: []}, complete=False))
    assert found(results) == {"final-read-incomplete": [set()]}
    assert not results.valid
    assert found(check(history(ops, None))) == {"final-read-incomplete": [set()]}


def test_examples_are_capped_but_counted() -> None:
    n = MAX_EXAMPLES + 7
    ops = [op(1, i, i, i + 0.5, FAIL, sends=[(OUT0, f"1.{i}.0", i)]) for i in range(n)]
    results = check(history(ops, {OUT0: [(i, f"1.{i}.0") for i in range(n)]}))
    assert len(results.anomalies["aborted-read"]) == MAX_EXAMPLES
    assert results.totals["anomaly_counts"] == {"aborted-read": n}
    assert results.counts() == {"aborted-read": n}


def test_an_aborted_transform_and_its_retry_are_no_duplicate() -> None:
    ops = [op(1, 0, 0, 1, sends=[(IN0, "1.0.0", 0)]),
           op(2, 0, 2, 3, FAIL, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 0)]),
           op(2, 1, 4, 5, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 2)],
              session=1, offsets={IN0: 1})]
    final = {IN0: [(0, "1.0.0")], OUT0: [(2, "x:1.0.0")]}
    assert found(check(history(ops, final, committed={IN0: 1}))) == {}


def test_unreadable_committed_offsets_are_an_incomplete_final_read_not_ctp_anomalies() -> None:
    """The group's offsets could not be read (OffsetFetch kept answering
    UNSTABLE_OFFSET_COMMIT): the transforms cannot be compared with them, which is reported
    once as an incomplete final read, never as a ctp-duplicate per derived record."""
    ops = [op(1, 0, 0, 1, sends=[(IN0, "1.0.0", 0)]),
           op(2, 0, 2, 3, polls=[{IN0: [(0, "1.0.0")]}], sends=[(OUT0, "x:1.0.0", 0)],
              offsets={IN0: 1})]
    final = {IN0: [(0, "1.0.0")], OUT0: [(0, "x:1.0.0")]}
    hist = history(ops, final)
    assert hist.final is not None
    hist.final.committed_error = "REQUEST_TIMED_OUT: last error UNSTABLE_OFFSET_COMMIT"
    results = check(hist)
    assert found(results) == {"final-read-incomplete": [set()]}
    assert "UNSTABLE_OFFSET_COMMIT" in results.anomalies["final-read-incomplete"][0].explanation
    assert not results.valid
