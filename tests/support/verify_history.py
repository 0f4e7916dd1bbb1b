"""Verify histories for the report's tests and its screenshot, built by hand (no workers,
no checker): ``small_history`` is a few transactions with one of each interesting thing;
``synthetic_history`` is a seeded, realistic-looking run of any length (transactions
back to back per worker slot, broker kills and pauses that stall them, client crashes that
leave an open transaction and restart the slot as a new process)."""

from __future__ import annotations

import random
from collections import Counter, defaultdict

from oncelog.verify.history import (
    Anomaly,
    Fault,
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

IN, OUT = "verify-7-in", "verify-7-out"


def run_info(duration_s: float, seed: int = 7, partitions: int = 4) -> RunInfo:
    return RunInfo(
        started_at=1_760_000_000.0, seed=seed, duration_s=duration_s,
        bootstrap="127.0.0.1:19092", target="single", clients=["oncelog", "confluent-kafka"],
        faults=["kill", "pause", "client-crash", "cut"], input_topic=IN, output_topic=OUT,
        partitions=partitions, group="verify-7-group", broker="oncelog",
        command=f"oncelog verify --spawn single --duration {duration_s:g}s --seed {seed} "
                "--faults kill,pause,client-crash,cut --report /tmp/verify-7",
    )


def totals(history: History) -> dict[str, object]:
    final = history.final
    return {
        "ops": len(history.ops),
        "txns": dict(Counter(op.outcome for op in history.ops)),
        "sends": sum(len(op.sends) for op in history.ops),
        "polled_records": sum(len(r) for op in history.ops for p in op.polls
                              for r in p.reads.values()),
        "faults": dict(Counter(f.kind for f in history.faults)),
        "final_records": 0 if final is None else sum(len(r) for r in final.reads.values()),
        "duration_s": history.info.duration_s,
        "clients": dict(Counter(op.client for op in history.ops)),
    }


def small_history() -> tuple[History, Results]:
    """Four processes over two slots (slot 0 restarted after a client crash), one op of
    each outcome and one that never completed, four faults, and anomalies of three classes
    (one with more examples than the report shows)."""
    a, b = tp_key(IN, 0), tp_key(OUT, 1)
    ops = [
        Op(0, "oncelog", 0, 0.5, 0.9, "ok", [Send(a, "0.0.0", 0), Send(b, "0.0.1", 0)]),
        Op(0, "oncelog", 1, 1.0, 1.4, "fail", [Send(a, "0.1.0", 1)]),
        Op(0, "oncelog", 2, 2.0, None, "unknown", [Send(a, "0.2.0")]),
        Op(1, "oncelog", 0, 4.0, 4.6, "ok", [Send(b, "1.0.0", 1)]),
        Op(1000, "confluent-kafka", 0, 0.6, 1.2, "ok", [Send(b, "1000.0.0", 2)],
           [Poll({a: [(0, "0.0.0")]})]),
        Op(1000, "confluent-kafka", 1, 3.0, 5.5, "unknown",
           [Send(a, "1000.1.0", 3), Send(b, "x:0.0.0", 3, source="0.0.0")]),
        Op(1001, "confluent-kafka", 0, 6.0, 6.3, "ok", [Send(a, "1001.0.0", 4)],
           [Poll({a: [(1, "0.1.0"), (3, "1000.1.0")]}, session=1)]),
    ]
    for i, op in enumerate(ops):
        op.index = i
    faults = [
        Fault("kill", "broker-0", 2.5, 4.0),
        Fault("pause", "broker-0", 5.0, 5.8),
        Fault("client-crash", "worker-0", 2.2, None, "kill -9 mid-transaction"),
        Fault("cut", "proxy", 7.0, 7.2),
    ]
    final = FinalRead({a: [(0, "0.0.0"), (3, "1000.1.0"), (4, "1001.0.0")],
                       b: [(0, "0.0.1"), (1, "1.0.0"), (2, "1000.0.0"), (3, "x:0.0.0")]},
                      complete=True, committed={a: 1}, time=9.0)
    history = History(run_info(8.0), ops, faults, final)
    anomalies = {
        "aborted-read": [Anomaly("aborted-read", "p1001#0 polled 0.1.0 of aborted p0#1",
                                 [1, 6], a, 1, "0.1.0")],
        "duplicate": [Anomaly("duplicate", f"value {n} at two offsets", [0], a, n, "0.0.0")
                      for n in range(7)],
        "G0": [Anomaly("G0", "ww cycle p0#0 -> p1000#0 -> p0#0", [0, 4])],
    }
    return history, Results(False, anomalies, totals(history))


def synthetic_history(seed: int, duration_s: float, slots: int = 4, rate: float = 12.0,
                      partitions: int = 4) -> tuple[History, Results]:
    """A valid-looking run: ``slots`` workers doing about ``rate`` transactions a second
    each, a fault every ~15 s; the results report one G0 (not a failure) so the page shows
    its markers."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    t = rng.uniform(4, 10)
    while t < duration_s - 3:
        kind = rng.choice(["kill", "pause", "client-crash", "cut"])
        if kind == "client-crash":
            faults.append(Fault(kind, f"worker-{rng.randrange(slots)}", t, None))
        else:
            length = rng.uniform(0.3, 1.0) if kind == "cut" else rng.uniform(2, 6)
            faults.append(Fault(kind, "broker-0" if kind != "cut" else "proxy", t, t + length))
        t += rng.uniform(8, 22)
    stalls = sorted((f.start, f.end) for f in faults if f.kind in ("kill", "pause") and f.end)
    crashes: dict[int, list[float]] = defaultdict(list)
    for f in faults:
        if f.kind == "client-crash":
            crashes[int(f.target.split("-")[1])].append(f.start)
    next_offset: Counter[str] = Counter()
    final: dict[str, list[tuple[int, str]]] = defaultdict(list)
    ops: list[Op] = []
    for slot in range(slots):
        client = ("oncelog", "confluent-kafka")[slot % 2]
        incarnation, seq, t = 0, 0, rng.uniform(0.1, 0.5)
        pending_crashes = sorted(crashes[slot])
        next_stall = 0
        while t < duration_s:
            process = slot * 1000 + incarnation
            took = rng.expovariate(rate) * 0.8 + 0.01
            end = t + took
            while next_stall < len(stalls) and stalls[next_stall][1] <= t:
                next_stall += 1  # time only moves forward within a slot
            stalled = (stalls[next_stall] if next_stall < len(stalls)
                       and stalls[next_stall][0] < end else None)
            outcome: Outcome = "ok" if rng.random() > 0.1 else "fail"
            if stalled is not None:
                end = stalled[1] + rng.uniform(0.1, 0.8)
                outcome = rng.choice(["unknown", "fail", "ok"])
            crashed = bool(pending_crashes) and pending_crashes[0] < end
            sends = []
            for i in range(rng.randint(1, 4)):
                tp = tp_key(rng.choice((IN, OUT)), rng.randrange(partitions))
                value = f"{process}.{seq}.{i}"
                offset = next_offset[tp]
                next_offset[tp] += 1
                sends.append(Send(tp, value, None if crashed else offset))
                if outcome == "ok" and not crashed:
                    final[tp].append((offset, value))
            if crashed:
                ops.append(Op(process, client, seq, t, None, "unknown", sends))
                t = pending_crashes.pop(0) + rng.uniform(0.8, 1.5)
                incarnation, seq = incarnation + 1, 0
                continue
            ops.append(Op(process, client, seq, t, end, outcome, sends,
                          [Poll({}, session=incarnation)]))
            seq += 1
            t = end + rng.uniform(0.001, 0.02)
    ops.sort(key=lambda op: op.invoke)
    for i, op in enumerate(ops):
        op.index = i
    final_read = FinalRead({tp: sorted(r) for tp, r in final.items()}, complete=True,
                           time=duration_s + 4.0)
    history = History(run_info(duration_s, seed, partitions), ops, faults, final_read)
    ok = [op.index for op in ops if op.outcome == "ok"]
    g0 = [Anomaly("G0", "a write-write cycle across two partitions (Kafka does not order "
                  "writes across partitions)", [ok[len(ok) // 3], ok[len(ok) // 3 + 1]])]
    return history, Results(True, {"G0": g0}, totals(history))
