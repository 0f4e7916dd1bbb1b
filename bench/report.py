"""The report's tables (pure): throughput per phase, the transaction tables, and the
targets of issue 18, from bench/run.py's outcomes (one dict per scenario, broker and run)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from bench import brokers
from bench.scenarios import Scenario

Result = dict[str, Any]


def rate(result: Result | None) -> tuple[float, float] | None:
    """(records/s, MB/s) of a phase result, None when it failed."""
    if not result or result.get("errors") or not result.get("seconds"):
        return None
    seconds = result["seconds"]
    return result["records"] / seconds, result["bytes"] / seconds / 1e6


def median_phase(runs: list[dict[str, Any]], phase: str) -> Result | None:
    """The run with the median records/s for a phase (failed runs excluded)."""
    good = [r[phase] for r in runs if rate(r.get(phase)) is not None]
    if not good:
        return None
    good.sort(key=lambda res: rate(res)[0])  # type: ignore[index]
    return good[(len(good) - 1) // 2]


def cpu_per(result: Result | None, unit: str, scale: float, key: str = "broker_cpu_s") -> str:
    """Broker CPU milliseconds per ``unit`` of a phase result (per MB: unit "bytes", 1e6);
    ``key`` another process's CPU (``etcd_cpu_s``)."""
    if not result or result.get(key) is None or not result.get(unit):
        return "—"
    return f"{result[key] * 1000 / (result[unit] / scale):.2f}"


def ratio_pairs(broker_names: list[str]) -> list[tuple[str, str]]:
    """(oncelog run, other broker) pairs whose rates are compared: same broker count."""
    ours = [n for n in broker_names if n.startswith("oncelog")]
    return [(o, t) for o in ours for t in broker_names
            if not t.startswith("oncelog") and brokers.SIZES[o] == brokers.SIZES[t]]


def skipped(runs: list[dict[str, Any]]) -> bool:
    """Every run of a (scenario, broker) skipped (replication factor above its size)."""
    return bool(runs) and all("skipped" in r for r in runs)


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def results_table(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenarios: list[Scenario]
) -> str:
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for outcome in outcomes:
        by_key[(outcome["scenario"], outcome["broker"])].append(outcome)
    # oncelog's rate over each other broker's of the same size, e.g. "oncelog/Tansu".
    pairs = ratio_pairs(broker_names)
    header = ["scenario", "records", "phase"]
    for name in broker_names:
        label = brokers.LABELS[name]
        header += [f"{label} records/s", f"{label} MB/s", f"{label} CPU ms/MB"]
    header += [f"{brokers.LABELS[o]}/{brokers.LABELS[t]}" for o, t in pairs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 3 + "---:|" * (len(header) - 3)]
    joins = ["| scenario | " + " | ".join(f"{brokers.LABELS[n]} join s" for n in broker_names)
             + " |", "|---|" + "---:|" * len(broker_names)]
    rate_scenarios = [sc for sc in scenarios if sc.small_txns is not None]
    ctp_scenarios = [sc for sc in scenarios if sc.ctp_commit_every is not None]
    for scenario in scenarios:
        if scenario.small_txns is not None:
            continue
        join_cells = []
        for phase in ("produce", "consume") if scenario.consume else ("produce",):
            cells = [scenario.name, fmt_int(scenario_records(outcomes, scenario)), phase]
            rates: dict[str, float] = {}
            for name in broker_names:
                chosen = median_phase(by_key[(scenario.name, name)], phase)
                r = rate(chosen)
                if skipped(by_key[(scenario.name, name)]):
                    cells += ["n/a", "—", "—"]
                elif r is None:
                    cells += ["failed", "—", "—"]
                else:
                    rates[name] = r[0]
                    cells += [fmt_int(r[0]), f"{r[1]:.1f}", cpu_per(chosen, "bytes", 1e6)]
                if phase == "consume":
                    join = chosen.get("join_seconds") if chosen else None
                    join_cells.append(f"{join:.2f}" if join is not None else "—")
            for ours, other in pairs:
                ratio = (rates[ours] / rates[other]
                         if ours in rates and other in rates else None)
                cells.append(f"{ratio:.2f}" if ratio is not None else "—")
            lines.append("| " + " | ".join(cells) + " |")
        if join_cells:
            joins.append(f"| {scenario.name} | " + " | ".join(join_cells) + " |")
    parts = ["\n".join(lines)] if len(rate_scenarios) < len(scenarios) else []
    if len(joins) > 2:
        parts.append("Consumer group join (subscribe to partition assignment):\n\n"
                     + "\n".join(joins))
    parts.append(side_cpu_table(outcomes, scenarios))
    if rate_scenarios:
        parts.append(txn_rate_table(outcomes, broker_names, rate_scenarios))
    if ctp_scenarios:
        parts.append(ctp_table(outcomes, broker_names, ctp_scenarios))
    return "\n\n".join(part for part in parts if part)


def side_cpu_table(outcomes: list[dict[str, Any]], scenarios: list[Scenario]) -> str:
    """etcd's CPU over each phase of the oncelog cluster runs (not in its broker CPU)."""
    lines = ["etcd (the oncelog cluster's metadata service) over the same phases, not "
             "included in the broker CPU above:", "",
             "| scenario | broker | phase | etcd CPU s | etcd CPU ms/MB or ms/txn |",
             "|---|---|---|---:|---:|"]
    order = {s.name: i for i, s in enumerate(scenarios)}
    rows = 0
    for o in sorted(outcomes, key=lambda o: order.get(o["scenario"], 0)):
        for phase in ("produce", "consume", "txn-rate"):
            res = o.get(phase)
            if not res or res.get("etcd_cpu_s") is None or res.get("errors"):
                continue
            unit = ("txns", 1.0) if phase == "txn-rate" else ("bytes", 1e6)
            lines.append(f"| {o['scenario']} | {brokers.LABELS[o['broker']]} | {phase} "
                         f"| {res['etcd_cpu_s']:.2f} | {cpu_per(res, *unit, key='etcd_cpu_s')} |")
            rows += 1
    return "\n".join(lines) if rows else ""


def median_by_broker(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenario: str, phase: str,
    key: str = "txn_per_s",
) -> tuple[dict[str, Result], set[str]]:
    """Per broker, the phase result with the median ``key`` over its good runs; and the
    brokers that skipped the scenario."""
    chosen: dict[str, Result] = {}
    not_run: set[str] = set()
    for name in broker_names:
        mine = [o for o in outcomes if o["scenario"] == scenario and o["broker"] == name]
        if skipped(mine):
            not_run.add(name)
        good = sorted((r for r in (o.get(phase) for o in mine) if r and not r.get("errors")),
                      key=lambda r: r[key])
        if good:
            chosen[name] = good[(len(good) - 1) // 2]
    return chosen, not_run


def _rows(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenario: str, phase: str,
    blank: int,
) -> Iterator[tuple[str, Result | None, Result | None, str]]:
    """Per broker: its label, the median result of ``phase`` (None: failed or not run),
    oncelog's of the same size to compare with, and the row to write when there is none
    (``blank`` cells of "—" with "n/a" or "failed" in the second)."""
    pairs = dict((t, o) for o, t in ratio_pairs(broker_names))
    chosen, not_run = median_by_broker(outcomes, broker_names, scenario, phase)
    for name in broker_names:
        state = "n/a" if name in not_run else "failed"
        cells = ["—"] * blank
        cells[1] = state
        ours = chosen.get(pairs[name]) if name in pairs else None
        yield brokers.LABELS[name], chosen.get(name), ours, " | ".join(cells) + " |"


def txn_rate_table(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenarios: list[Scenario]
) -> str:
    """Transactions/s and commit latency (begin to commit returned) per broker."""
    lines = [
        "Small transactions, one after the other (begin, sends, commit) in each producer;",
        "with several producers, transactions/s is the total over all of them (from the",
        "first producer's start to the last one's end):",
        "",
        "| scenario | client | broker | producers | transactions | transactions/s "
        "| oncelog/broker (txn/s) | p50 ms | p99 ms | broker CPU ms/txn | broker CPU ms/MB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in scenarios:
        client = ("oncelog.client, 2PC" if scenario.two_phase
                  else "oncelog.client" if scenario.client == "oncelog" else scenario.client)
        for label, r, ours, blank in _rows(outcomes, broker_names, scenario.name, "txn-rate", 7):
            head = f"| {scenario.name} | {client} | {label} | {scenario.producers}"
            if r is None:
                lines.append(f"{head} | {blank}")
                continue
            ratio = (f"{ours['txn_per_s'] / r['txn_per_s']:.2f}"
                     if ours is not None else "—")
            lines.append(
                f"{head} | {fmt_int(r['txns'])} | {r['txn_per_s']:,.0f} | {ratio} "
                f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {cpu_per(r, 'txns', 1)} "
                f"| {cpu_per(r, 'bytes', 1e6)} |"
            )
    prepared = [(sc.name, name, r["prepare_p50_ms"]) for sc in scenarios if sc.two_phase
                for name, r in median_by_broker(outcomes, broker_names, sc.name,
                                                "txn-rate")[0].items()
                if r.get("prepare_p50_ms") is not None]
    if prepared:
        lines += ["", "Two-phase commit: p50 of prepare_transaction alone (the rest of each "
                  "transaction's time is begin, sends and complete_transaction): "
                  + "; ".join(f"{brokers.LABELS[b]} {ms:.2f} ms" for _, b, ms in prepared)
                  + "."]
    return "\n".join(lines)


def ctp_table(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenarios: list[Scenario]
) -> str:
    """Consume-transform-produce: input records/s, commits/s, latency and broker CPU."""
    lines = [
        "Consume-transform-produce (read_committed input; records/s counts input records, "
        "each also written as one derived record; commit latency is send_offsets_to_"
        "transaction plus commit_transaction):",
        "",
        "| scenario | broker | records | commits | records/s | commits/s | oncelog/broker "
        "| commit p50 ms | commit p99 ms | broker CPU µs/record | broker CPU ms/txn "
        "| broker CPU ms/MB | group join s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario in scenarios:
        for label, r, ours, blank in _rows(outcomes, broker_names, scenario.name, "ctp", 11):
            head = f"| {scenario.name} | {label}"
            if r is None:
                lines.append(f"{head} | {blank}")
                continue
            per_s = r["records"] / r["seconds"] if r["seconds"] else 0.0
            ratio = (f"{ours['records'] / ours['seconds'] / per_s:.2f}"
                     if ours is not None and per_s and ours["seconds"] else "—")
            join = r.get("join_seconds")
            lines.append(
                f"{head} | {fmt_int(r['records'])} | {fmt_int(r['txns'])} | {fmt_int(per_s)} "
                f"| {r['txn_per_s']:,.0f} | {ratio} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
                f"| {cpu_per(r, 'records', 1000)} | {cpu_per(r, 'txns', 1)} "
                f"| {cpu_per(r, 'bytes', 1e6)} | {'—' if join is None else f'{join:.2f}'} |"
            )
    return "\n".join(lines)


def scenario_records(outcomes: list[dict[str, Any]], scenario: Scenario) -> int:
    for outcome in outcomes:
        if outcome["scenario"] == scenario.name:
            return int(outcome["records"])
    return 0


def problems(outcomes: list[dict[str, Any]]) -> list[str]:
    found = []
    for o in outcomes:
        if "skipped" in o:
            continue
        where = f"{o['broker']} {o['scenario']}"
        phases: tuple[str, ...] = (("txn-rate",) if "txn-rate" in o
                  else ("produce", "consume") if "consume" in o or "produce" not in o
                  else ("produce",))
        if "ctp" in o:
            phases += ("ctp",)
        for phase in phases:
            res = o.get(phase)
            if res is None:
                found.append(f"{where} {phase}: not run")
            elif res.get("errors"):
                found.append(f"{where} {phase}: {res['errors']} errors, e.g. "
                             f"{'; '.join(res.get('first_errors', []))[:300]}")
        if o.get("exit_code") not in (0, None):
            found.append(f"{where}: broker exited with code {o['exit_code']} on SIGTERM")
    return found


# Issue 18's figures before any optimisation: the "3x today's" and "2x today's" targets are
# measured against these. 8 producers: the 2026-11-23 run of bench/RESULTS.md (load 5-10),
# the highest measured before issue 18; the issue 18 baseline runs of 2026-11-28 on a machine
# at load 10-39 gave 275 and 258 (bench/RESULTS.md, "Issue 18 baseline").
ISSUE18_BASELINE_TXN_PER_S_8P: float | None = 1067.0
ISSUE18_BASELINE_SPARK_RECORDS_PER_S = 2882.0
"""bench/spark_pipeline.py, exactly-once sink (bench/RESULTS.md, issue 6's section)."""


def _phase_figure(
    outcomes: list[dict[str, Any]], scenario: str, broker: str, phase: str, figure: str
) -> float | None:
    """``figure`` of the median run of a phase: ``txn_per_s``, ``mb_per_s`` or
    ``cpu_ms_per_txn``."""
    runs = [o for o in outcomes if o["scenario"] == scenario and o["broker"] == broker]
    if phase == "txn-rate":
        chosen = median_by_broker(runs, [broker], scenario, phase)[0].get(broker)
    else:
        chosen = median_phase(runs, phase)
    if chosen is None:
        return None
    if figure == "txn_per_s":
        return float(chosen["txn_per_s"])
    if figure == "mb_per_s":
        r = rate(chosen)
        return r[1] if r else None
    cpu = chosen.get("broker_cpu_s")
    return cpu * 1000 / chosen["txns"] if cpu is not None and chosen.get("txns") else None


def client_mb_per_s(client: dict[str, Any] | None, name: str, phase: str) -> float | None:
    """Median MB/s of a client phase in bench/client_bench.py's ``--json`` output."""
    if not client or not client.get("results", {}).get(name, {}).get(phase):
        return None
    runs = client["results"][name][phase]
    size = int(client["size"])
    rates = sorted(r["records"] * size / 1e6 / r["seconds"] for r in runs if r["seconds"])
    return rates[len(rates) // 2] if rates else None


def _cell(value: float | None, fmt: str = "{:,.1f}") -> str:
    return "—" if value is None else fmt.format(value)


def _met(ok: bool | None) -> str:
    return "—" if ok is None else ("met" if ok else "not met")


def targets_table(
    outcomes: list[dict[str, Any]],
    client: dict[str, Any] | None,
    floor: dict[str, dict[str, Any]] | None = None,
) -> str:
    """Issue 18's targets, each from this run: oncelog next to Apache Kafka 4.4 (and Tansu),
    the ratio, the goal and whether it is met."""
    rows = ["| target | oncelog | Kafka 4.4 | Tansu | ratio | goal | status |",
            "|---|---:|---:|---:|---:|---|---|"]

    def fig(scenario: str, broker: str, phase: str, figure: str) -> float | None:
        return _phase_figure(outcomes, scenario, broker, phase, figure)

    eight = "txn-rate-10x100B-8p-8producers"
    ours, kafka, tansu = (fig(eight, b, "txn-rate", "txn_per_s")
                          for b in ("oncelog", "kafka", "tansu"))
    ratio = ours / kafka if ours and kafka else None
    base = ISSUE18_BASELINE_TXN_PER_S_8P
    goal = (f">= Kafka and >= 3x the baseline ({3 * base:,.0f})" if base
            else ">= Kafka (and >= 3x this baseline)")
    ok = None if ratio is None else ratio >= 1 and (base is None or (ours or 0) >= 3 * base)
    rows.append(f"| small transactions/s, 8 producers (`{eight}`) | {_cell(ours, '{:,.0f}')} "
                f"| {_cell(kafka, '{:,.0f}')} | {_cell(tansu, '{:,.0f}')} "
                f"| {_cell(ratio, '{:.2f}')} | {goal} | {_met(ok)} |")
    for scenario in ("txn-rate-10x100B-1p", eight, "txn-rate-10x100B-32p-32producers"):
        ours, kafka, tansu = (fig(scenario, b, "txn-rate", "cpu_ms_per_txn")
                              for b in ("oncelog", "kafka", "tansu"))
        if ours is None and kafka is None:
            continue
        rows.append(f"| broker CPU ms per small transaction (`{scenario}`) "
                    f"| {_cell(ours, '{:.2f}')} | {_cell(kafka, '{:.2f}')} "
                    f"| {_cell(tansu, '{:.2f}')} | — | <= 0.5 ms "
                    f"| {_met(None if ours is None else ours <= 0.5)} |")
    if floor:
        ours, kafka, tansu = ((floor.get(b) or {}).get("cpu_us") for b in ("oncelog", "kafka",
                                                                           "tansu"))
        rows.append("| (why) broker CPU ms for 3 minimal requests, the floor of a small "
                    "transaction (`--request-floor`) "
                    f"| {_cell(ours and 3 * ours / 1000, '{:.2f}')} "
                    f"| {_cell(kafka and 3 * kafka / 1000, '{:.2f}')} "
                    f"| {_cell(tansu and 3 * tansu / 1000, '{:.2f}')} | — | — | — |")
    for phase in ("produce", "consume"):
        ours, kafka, tansu = (fig("1KiB-x200k-1p", b, phase, "mb_per_s")
                              for b in ("oncelog", "kafka", "tansu"))
        ratio = ours / kafka if ours and kafka else None
        rows.append(f"| 1 KiB {phase} MB/s, confluent-kafka (`1KiB-x200k-1p`) "
                    f"| {_cell(ours)} | {_cell(kafka)} | {_cell(tansu)} "
                    f"| {_cell(ratio, '{:.2f}')} | >= Kafka "
                    f"| {_met(None if ratio is None else ratio >= 1)} |")
    for phase in ("produce", "consume"):
        ours = client_mb_per_s(client, "oncelog", phase)
        theirs = client_mb_per_s(client, "confluent-kafka", phase)
        slower = theirs / ours if ours and theirs else None
        rows.append(f"| oncelog.client {phase} MB/s vs confluent-kafka "
                    f"({_cell(theirs)} MB/s), oncelog broker | {_cell(ours)} | — | — "
                    f"| {_cell(slower, '{:.2f}x')} slower | within 3x "
                    f"| {_met(None if slower is None else slower <= 3)} |")
    rows.append(f"| Spark payments pipeline, exactly-once sink | not in this run | — | — | — "
                f"| >= 2x {ISSUE18_BASELINE_SPARK_RECORDS_PER_S:,.0f} records/s "
                "(bench/spark_pipeline.py) | — |")
    return "\n".join(rows)
