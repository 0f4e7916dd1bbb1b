"""The "never forget" rule of the cluster fault runs (tests/support/never_forget.py): a
record read at an offset that is later another record, or missing from a pass or from the
final log, is reported; what consumers legitimately skip is not."""

from __future__ import annotations

from tests.support.never_forget import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    NeverForget,
    Record,
)

TP = ("t", 0)


def rec(value: str, epoch: int = 0) -> Record:
    return Record(None, value.encode(), 1000, epoch)


def read(rule: NeverForget, isolation: str, values: dict[int, str], end: int,
         start: int = 0) -> list[str]:
    """One pass of ``isolation`` reading ``values`` (offset -> value) then the end."""
    rule.begin_pass(isolation, TP, start)
    found = [str(f) for o, v in sorted(values.items()) for f in rule.observe(
        isolation, TP, o, rec(v))]
    return found + [str(f) for f in rule.at_end(isolation, TP, end)]


def test_reading_the_same_records_again_is_no_anomaly() -> None:
    rule = NeverForget()
    log = {0: "a", 1: "b", 2: "c"}
    assert read(rule, READ_UNCOMMITTED, log, 3) == []
    assert read(rule, READ_COMMITTED, log, 3) == []
    assert read(rule, READ_UNCOMMITTED, {**log, 3: "d"}, 4) == []
    assert rule.final(TP, 4) == []
    assert rule.forgotten_offsets() == 0 and rule.remembered() == 4


def test_another_record_at_a_read_offset_is_changed() -> None:
    rule = NeverForget()
    read(rule, READ_UNCOMMITTED, {0: "c0", 1: "u1"}, 2)
    # the case 1: u1 read under both isolation levels, later n1 at offset 1
    found = read(rule, READ_COMMITTED, {0: "c0", 1: "n1"}, 2)
    assert len(found) == 1
    (anomaly,) = rule.forgotten
    assert (anomaly.offset, anomaly.first.value, anomaly.first_read) == (
        1, b"u1", READ_UNCOMMITTED)
    assert anomaly.then is not None and anomaly.then.value == b"n1"
    # seen again by the other consumer: the same change, reported once
    assert read(rule, READ_UNCOMMITTED, {0: "c0", 1: "n1"}, 2) == []
    assert rule.forgotten_offsets() == 1


def test_a_copy_of_the_value_from_another_leader_epoch_is_changed() -> None:
    rule = NeverForget()
    rule.begin_pass(READ_UNCOMMITTED, TP)
    assert rule.observe(READ_UNCOMMITTED, TP, 0, rec("v", epoch=3)) == []
    rule.begin_pass(READ_UNCOMMITTED, TP)
    assert len(rule.observe(READ_UNCOMMITTED, TP, 0, rec("v", epoch=4))) == 1


def test_a_read_offset_skipped_by_a_later_pass_is_gone() -> None:
    rule = NeverForget()
    read(rule, READ_UNCOMMITTED, {0: "a", 1: "b", 2: "c"}, 3)
    found = read(rule, READ_UNCOMMITTED, {0: "a", 2: "c"}, 3)
    assert len(found) == 1 and "skipped" in found[0] and "@1" in found[0]
    (anomaly,) = rule.forgotten
    assert anomaly.then is None


def test_a_pass_ending_before_a_read_offset_is_judged_only_at_the_end() -> None:
    rule = NeverForget()
    read(rule, READ_UNCOMMITTED, {0: "a", 1: "b", 2: "c"}, 3)
    # a new leader whose high watermark lags: the end is below offset 2 for a while
    assert read(rule, READ_UNCOMMITTED, {0: "a", 1: "b"}, 2) == []
    assert read(rule, READ_UNCOMMITTED, {0: "a", 1: "b", 2: "c"}, 3) == []
    assert rule.final(TP, 3) == []
    # the log ends below it for good: gone
    found = rule.final(TP, 2)
    assert len(found) == 1 and found[0].offset == 2 and "final high watermark" in found[0].how


def test_records_read_only_uncommitted_may_be_skipped_by_read_committed() -> None:
    rule = NeverForget()
    # offsets 1-2 an aborted transaction, 3 its ABORT marker (no consumer returns it)
    read(rule, READ_UNCOMMITTED, {0: "a", 1: "x1", 2: "x2", 4: "b"}, 5)
    assert read(rule, READ_COMMITTED, {0: "a", 4: "b"}, 5) == []
    # but not by read_uncommitted
    assert len(read(rule, READ_UNCOMMITTED, {0: "a", 4: "b"}, 5)) == 2


def test_records_read_committed_must_stay_for_both_isolation_levels() -> None:
    rule = NeverForget()
    read(rule, READ_COMMITTED, {0: "a", 1: "b", 2: "c"}, 3)
    assert rule.forgotten == []
    found = read(rule, READ_COMMITTED, {0: "a", 2: "c"}, 3)
    assert len(found) == 1 and rule.forgotten[0].first_read == READ_COMMITTED
    # read_uncommitted skipping it is the same gone offset, reported once
    assert read(rule, READ_UNCOMMITTED, {0: "a", 2: "c"}, 3) == []
    # an end skipping a committed read offset: gone
    rule2 = NeverForget()
    read(rule2, READ_COMMITTED, {0: "a", 1: "b"}, 2)
    assert len(read(rule2, READ_COMMITTED, {0: "a"}, 3)) == 1


def test_a_pass_from_a_later_offset_judges_only_what_it_passes() -> None:
    rule = NeverForget()
    read(rule, READ_UNCOMMITTED, {0: "a", 1: "b", 2: "c", 3: "d"}, 4)
    assert read(rule, READ_UNCOMMITTED, {3: "d"}, 4, start=3) == []
    assert len(read(rule, READ_UNCOMMITTED, {3: "d"}, 4, start=1)) == 2


def test_the_first_reader_and_the_partition_are_kept_apart() -> None:
    rule = NeverForget()
    rule.begin_pass(READ_COMMITTED, TP)
    rule.observe(READ_COMMITTED, TP, 0, rec("a"))
    rule.begin_pass(READ_UNCOMMITTED, TP)
    rule.observe(READ_UNCOMMITTED, TP, 0, rec("a"))
    rule.begin_pass(READ_UNCOMMITTED, ("t", 1))
    assert rule.observe(READ_UNCOMMITTED, ("t", 1), 0, rec("z")) == []
    (anomaly,) = rule.observe(READ_UNCOMMITTED, TP, 0, rec("z"))
    assert anomaly.first_read == READ_COMMITTED and anomaly.partition == 0
