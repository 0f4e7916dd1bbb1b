"""The runner's pure parts: merging the workers' invoke/op lines, worker numbering, the
last line of a worker's file."""

from __future__ import annotations

from pathlib import Path

from oncelog.verify.history import FAIL, OK, UNKNOWN, Op, Poll, Send, invoke_line, op_line
from oncelog.verify.pool import last_line_type, process_number
from oncelog.verify.runner import merge_ops


def _op(process: int, seq: int, invoke: float, outcome: str = OK) -> Op:
    op = Op(process, "oncelog", seq, invoke, complete=invoke + 0.1,
            sends=[Send("t-in/0", f"{process}.{seq}.0", offset=seq)],
            polls=[Poll({"t-in/1": [(3, "9.1.0")]}, session=1)], offsets={"t-in/1": 4})
    op.outcome = outcome  # type: ignore[assignment]
    return op


def test_an_op_line_replaces_its_invoke_line() -> None:
    planned = _op(1, 1, 0.5)
    planned.outcome, planned.complete = UNKNOWN, None
    planned.sends[0].offset = None
    done = _op(1, 1, 0.5, OK)
    ops = merge_ops([invoke_line(planned), op_line(done)])
    assert [(o.name, o.outcome, o.complete, o.sends[0].offset) for o in ops] == [
        ("p1#1", OK, 0.6, 1)]


def test_an_invoke_without_its_op_becomes_an_unknown_op_with_its_planned_sends() -> None:
    planned = _op(1000, 7, 2.0)
    planned.complete = None
    ops = merge_ops([invoke_line(planned)])
    (op,) = ops
    assert op.outcome == UNKNOWN and op.complete is None
    assert [(s.value, s.offset) for s in op.sends] == [("1000.7.0", None)]
    assert op.polls == planned.polls and op.offsets == {"t-in/1": 4}
    assert op.error is not None and "no completion" in op.error


def test_ops_are_sorted_by_invocation_and_indexed_and_torn_lines_skipped() -> None:
    lines = [op_line(_op(2000, 1, 3.0, FAIL)), op_line(_op(0, 1, 1.0)),
             '{"type":"op","process":0,"cli', op_line(_op(0, 2, 2.0)),
             '{"type":"final","reads":{},"complete":true}', "[1, 2]", ""]
    ops = merge_ops(lines)
    assert [(o.name, o.index) for o in ops] == [("p0#1", 0), ("p0#2", 1), ("p2000#1", 2)]
    assert ops[2].outcome == FAIL


def test_process_numbers_stay_unique_across_restarts() -> None:
    assert process_number(0, 0) == 0
    assert process_number(3, 2) == 3002
    assert len({process_number(s, k) for s in range(8) for k in range(50)}) == 400


def test_last_line_type_sees_an_open_transaction(tmp_path: Path) -> None:
    path = tmp_path / "w.jsonl"
    assert last_line_type(path) is None
    path.write_text(op_line(_op(1, 1, 0.1)) + "\n" + invoke_line(_op(1, 2, 0.2)) + "\n")
    assert last_line_type(path) == "invoke"
    with open(path, "a") as f:
        f.write(op_line(_op(1, 2, 0.2)) + "\n" + '{"type":"invo')  # torn by kill -9
    assert last_line_type(path) == "op"
