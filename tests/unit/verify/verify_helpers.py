"""Small builders for hand-made verify histories (topics ``in`` and ``out``)."""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.verify.history import (
    OK,
    FinalRead,
    History,
    Op,
    Outcome,
    Poll,
    Results,
    RunInfo,
    Send,
    tp_key,
)

IN, OUT = "in", "out"
IN0, IN1, OUT0, OUT1 = tp_key(IN, 0), tp_key(IN, 1), tp_key(OUT, 0), tp_key(OUT, 1)


def op(process: int, seq: int, invoke: float, complete: float | None, outcome: Outcome = OK,
       sends: Sequence[tuple[str, str, int | None]] = (),
       polls: Sequence[dict[str, list[tuple[int, str]]]] = (), session: int = 0,
       offsets: dict[str, int] | None = None) -> Op:
    """An operation; ``sends`` as (tp, value, delivery offset), each poll as tp -> records."""
    return Op(process=process, client="oncelog", seq=seq, invoke=invoke, complete=complete,
              outcome=outcome,
              sends=[Send(tp, value, offset,
                          value[2:] if value.startswith("x:") else None)
                     for tp, value, offset in sends],
              polls=[Poll(dict(reads), session) for reads in polls],
              group="g", offsets=dict(offsets or {}))


def history(ops: Sequence[Op], final: dict[str, list[tuple[int, str]]] | None,
            committed: dict[str, int] | None = None, complete: bool = True) -> History:
    for i, o in enumerate(ops):
        o.index = i
    info = RunInfo(started_at=0.0, seed=1, duration_s=10.0, bootstrap="localhost:9092",
                   target="single", clients=["oncelog"], faults=[], input_topic=IN,
                   output_topic=OUT, partitions=2, group="g")
    read = None if final is None else FinalRead(final, complete, dict(committed or {}), 20.0)
    return History(info, list(ops), [], read)


def found(results: Results) -> dict[str, list[set[int]]]:
    """kind -> the op sets of its anomalies, for the kinds found."""
    return {kind: [set(a.ops) for a in anomalies]
            for kind, anomalies in results.anomalies.items() if anomalies}
