"""The verify report: ``report.html``, one static page a person can look at, and
``results.json`` for machines.

The page is self-contained (inline CSS, SVG drawn here, a little vanilla JavaScript for
hover details and filters; no external URL): a header with the verdict and the run's
parameters, a timeline of every worker process's transactions with the fault bands and the
anomaly markers on the operations they cite, a chart of committed transactions per second,
the anomaly table with examples, and the workload totals.

A 30-minute run has ~100k transactions: above ``EXACT_BARS`` operations the timeline draws,
per lane, one bucket of ``BUCKET_PX`` pixels per stretch of time (coloured: unknown if any
transaction in it is unknown, else ok if any committed, else fail) and keeps exact bars only
for the operations anomalies cite and those that never completed, so the page stays small.

Stable hooks for tests and scripts: ``#verdict[data-valid]``, ``#timeline`` (``g.lane``
per process, ``rect.op[data-op]`` / ``rect.bucket``, ``rect.fault[data-kind]``,
``path.marker[data-kind][data-op]``), ``#throughput``, ``#anomalies`` (one
``tr[data-kind][data-count]`` per anomaly class), ``#totals`` (``tr[data-key]``).
"""

from __future__ import annotations

import html
import json
import logging
import math
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.verify.history import (
    ANOMALY_KINDS,
    NOT_FAILURES,
    Anomaly,
    History,
    Op,
    Results,
    results_json,
)

log = logging.getLogger(__name__)

EXACT_BARS = 5000  # above this many operations, the timeline aggregates into buckets
BUCKET_PX = 2  # the width of one bucket in the timeline (pixels of the 1200-wide chart)
MAX_EXACT_KEPT = 3000  # cap on exact bars kept among buckets (cited / never completed)
MAX_MARKERS_PER_KIND = 300
EXAMPLES = 5

WIDTH = 1200
LEFT = 110  # room for the lane labels
RIGHT = 20
PLOT_W = WIDTH - LEFT - RIGHT

OUTCOME_COLOURS = {"ok": "#2e9d4f", "fail": "#a0a4a8", "unknown": "#f08c00"}
FAULT_COLOURS = {
    "kill": "#d62728", "pause": "#1f77b4", "partition": "#9467bd", "client-crash": "#8c564b",
    "cut": "#e377c2", "leader-kill": "#b8860b", "coordinator-kill": "#17becf",
}
OTHER_FAULT_COLOURS = ("#7f7f7f", "#393b79", "#637939", "#843c39")
ANOMALY_COLOUR = "#e00000"
TIMES = "\u00d7"
DASH = "\u2013"

# What each anomaly class means, in the reader's words (the checker's explanation of each
# instance is shown with its examples).
DESCRIPTIONS: dict[str, str] = {
    "duplicate": "One value appears at two offsets of a partition: a record was written twice.",
    "inconsistent-offset": "One offset of a partition holds two different values across "
                           "delivery reports, polls and the final read.",
    "aborted-read": "A read_committed poll or the final read saw a value of a transaction "
                    "that never committed.",
    "torn-transaction": "Only some of a transaction's records are visible: it was neither "
                        "all nor nothing.",
    "lost-write": "A committed value was never read although readers went past its offset.",
    "unseen-write": "A committed value is missing from the final read (its offset unknown, "
                    "so not provably lost).",
    "nonmonotonic-poll": "Within one consumer session, a partition's polled offsets went "
                         "backwards or repeated.",
    "poll-skip": "Within one consumer session, consecutive polls skipped a committed record.",
    "nonmonotonic-send": "One producer session's delivery offsets in a partition did not "
                         "increase from one transaction to the next.",
    "ctp-duplicate": "Consume-transform-produce: an input record produced two or more "
                     "outputs (or an output exists past the group's committed offset).",
    "ctp-lost": "Consume-transform-produce: an input record below the group's committed "
                "offset produced no output.",
    "G1c": "A cycle of write-write and write-read dependencies between transactions: "
           "circular information flow.",
    "G0": "A cycle of write-write dependencies only. Kafka does not order writes across "
          "partitions, so this is reported but is not a failure.",
    "final-read-incomplete": "The final read did not reach the end of every partition: the "
                             "run cannot vouch for lost or unseen writes.",
}


def write_report(directory: Path, history: History, results: Results) -> Path:
    """Write ``results.json`` and ``report.html`` into ``directory``; return the page's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "results.json").write_text(json.dumps(results_json(results), indent=1) + "\n")
    page = directory / "report.html"
    text = render_html(history, results)
    page.write_text(text, encoding="utf-8")
    log.info("verify report written: %s (%d ops, %d faults, anomalies %s, %d bytes)",
             page, len(history.ops), len(history.faults), results.counts() or "none", len(text))
    return page


def render_html(history: History, results: Results) -> str:
    ops = _indexed(history.ops)
    info = history.info
    title = f"oncelog verify — {info.broker} {info.target} seed {info.seed}"
    body = "\n".join((
        _header(history, results),
        '<section><h2>Timeline</h2>',
        _filters(),
        _timeline_svg(history, ops, results),
        '<div id="detail" class="detail">Hover over a transaction, a bucket, a fault or a '
        'marker for details.</div>',
        _throughput_svg(history),
        '</section>',
        f'<section><h2>Anomalies</h2>{_anomaly_table(ops, results)}</section>',
        f'<section><h2>Totals</h2>{_totals_table(results)}</section>',
    ))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<title>{_e(title)}</title><style>{_CSS}</style></head>\n'
            f'<body>\n{body}\n<script>{_JS}</script>\n</body></html>\n')


# ---- header ----------------------------------------------------------------------------

def _header(history: History, results: Results) -> str:
    info = history.info
    counts = results.counts()
    failures = {k: n for k, n in counts.items() if k not in NOT_FAILURES}
    reported = {k: n for k, n in counts.items() if k in NOT_FAILURES}
    if results.valid:
        verdict = "Valid: no anomalies" if not counts else "Valid"
    else:
        verdict = "Invalid: " + ", ".join(f"{k} {TIMES}{n}" for k, n in failures.items())
    if reported:
        verdict += " — reported, not failures: " + ", ".join(
            f"{k} {TIMES}{n}" for k, n in reported.items())
    final = history.final
    final_text = ("none" if final is None else
                  f"{sum(len(r) for r in final.reads.values())} records, "
                  f"{'complete' if final.complete else 'INCOMPLETE'}")
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info.started_at))
    fields = [
        ("broker", info.broker), ("target", info.target), ("bootstrap", info.bootstrap),
        ("seed", str(info.seed)), ("duration", f"{info.duration_s:g} s"),
        ("started", started), ("clients", ", ".join(info.clients)),
        ("faults", ", ".join(info.faults) or "none"),
        ("topics", f"{info.input_topic}, {info.output_topic} {TIMES} {info.partitions} partitions"),
        ("group", info.group), ("final read", final_text),
    ]
    rows = "".join(f'<dt>{_e(k)}</dt><dd data-field="{_e(k)}">{_e(v)}</dd>' for k, v in fields)
    command = info.command or "(not recorded)"
    valid = "true" if results.valid else "false"
    return (f'<header><h1>oncelog verify</h1>'
            f'<div id="verdict" class="verdict {"valid" if results.valid else "invalid"}" '
            f'data-valid="{valid}">{_e(verdict)}</div>'
            f'<dl class="info">{rows}</dl>'
            f'<pre id="command">{_e(command)}</pre></header>')


def _filters() -> str:
    boxes = "".join(
        f'<label><input type="checkbox" checked data-hide="{cls}"> {label}</label>'
        for cls, label in (("ok", "committed"), ("fail", "aborted"), ("unknown", "unknown"),
                           ("fault", "faults"), ("marker", "anomaly markers")))
    legend = "".join(
        f'<span class="swatch" style="background:{c}"></span>{_e(k)} '
        for k, c in OUTCOME_COLOURS.items())
    return (f'<div class="filters" id="filters">{boxes}<span class="legend">{legend}'
            f'<span class="swatch hatch"></span>never completed '
            f'<span class="swatch" style="background:{ANOMALY_COLOUR}"></span>anomaly'
            f'</span></div>')


# ---- timeline --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Axis:
    end: float  # seconds shown, from 0

    def x(self, t: float) -> float:
        return LEFT + PLOT_W * min(max(t, 0.0), self.end) / self.end


@dataclass(frozen=True)
class _Lanes:
    y: dict[int, float]  # process -> top of its lane
    height: float  # of one lane
    bottom: float


def _indexed(ops: list[Op]) -> dict[int, Op]:
    """Ops by the index anomalies cite (``Op.index``; the position when the runner left it
    unset, as in hand-built histories)."""
    return {(op.index if op.index >= 0 else i): op for i, op in enumerate(ops)}


def _time_end(history: History) -> float:
    times: list[float] = [history.info.duration_s, 1.0]
    for op in history.ops:
        times.append(op.invoke)
        if op.complete is not None:
            times.append(op.complete)
    for fault in history.faults:
        times.append(fault.end if fault.end is not None else fault.start)
    if history.final is not None:
        times.append(history.final.time)
    return max(times)


def _lanes(processes: Iterable[int], top: float) -> _Lanes:
    ordered = sorted(set(processes))
    height = max(3.0, min(14.0, 560.0 / max(1, len(ordered))))
    y: dict[int, float] = {}
    cursor = top
    previous_slot: int | None = None
    for process in ordered:
        if previous_slot is not None and process // 1000 != previous_slot:
            cursor += 6  # a gap between slots
        y[process] = cursor
        cursor += height
        previous_slot = process // 1000
    return _Lanes(y, height, cursor)


def _fault_colours(history: History) -> dict[str, str]:
    """A colour per fault kind: the known kinds' own, the others' in turn."""
    colours = dict(FAULT_COLOURS)
    others = sorted({f.kind for f in history.faults} - set(FAULT_COLOURS))
    for n, kind in enumerate(others):
        colours[kind] = OTHER_FAULT_COLOURS[n % len(OTHER_FAULT_COLOURS)]
    return colours


def _ticks(end: float) -> list[float]:
    for step in (0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600):
        if end / step <= 12:
            return [i * step for i in range(int(end / step) + 1)]
    return [0.0, end]


def _fmt_tick(t: float, end: float) -> str:
    if end > 180:
        return f"{int(t) // 60}:{int(t) % 60:02d}"
    return f"{t:g}s"


def _fmt_time(t: float | None) -> str:
    return "—" if t is None else f"{t:.3f}s"


def _axis_svg(axis: _Axis, top: float, bottom: float) -> list[str]:
    out = []
    for t in _ticks(axis.end):
        x = axis.x(t)
        out.append(f'<line class="grid" x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" '
                   f'y2="{bottom:.1f}"/><text class="tick" x="{x:.1f}" y="{bottom + 12:.1f}">'
                   f'{_fmt_tick(t, axis.end)}</text>')
    return out


def _op_title(op: Op) -> str:
    return (f"{op.name} [{op.client}] {op.outcome} {_fmt_time(op.invoke)} → "
            f"{_fmt_time(op.complete)}; {_sends_summary(op)}; {_polls_summary(op)}"
            + (f"; error: {op.error}" if op.error else ""))


def _op_bar(index: int, op: Op, axis: _Axis, lanes: _Lanes, cited: bool) -> str:
    x0 = axis.x(op.invoke)
    is_open = op.complete is None
    x1 = axis.x(axis.end if op.complete is None else op.complete)
    width = max(1.0, x1 - x0)
    y = lanes.y[op.process] + 1
    classes = ["op", op.outcome] + (["open"] if is_open else []) + (["cited"] if cited else [])
    return (f'<rect class="{" ".join(classes)}" data-op="{index}" x="{x0:.1f}" y="{y:.1f}" '
            f'width="{width:.1f}" height="{max(1.0, lanes.height - 2):.1f}">'
            f'<title>{_e(_op_title(op))}</title></rect>')


def _buckets(ops: dict[int, Op], skip: set[int], axis: _Axis, lanes: _Lanes) -> list[str]:
    counts: dict[tuple[int, int], Counter[str]] = defaultdict(Counter)
    for index, op in ops.items():
        if index not in skip:
            column = int((axis.x(op.invoke) - LEFT) // BUCKET_PX)
            counts[op.process, column][op.outcome] += 1
    seconds = axis.end * BUCKET_PX / PLOT_W
    out = []
    for (process, column), c in sorted(counts.items()):
        worst = "unknown" if c["unknown"] else "ok" if c["ok"] else "fail"
        start = column * seconds
        out.append(
            f'<rect class="bucket {worst}" data-process="{process}" '
            f'x="{LEFT + column * BUCKET_PX}" y="{lanes.y[process] + 1:.1f}" '
            f'width="{BUCKET_PX}" height="{max(1.0, lanes.height - 2):.1f}" '
            f'data-ok="{c["ok"]}" data-fail="{c["fail"]}" data-unknown="{c["unknown"]}">'
            f'<title>p{process} {start:.1f}{DASH}{start + seconds:.1f}s: {c["ok"]} committed, '
            f'{c["fail"]} aborted, {c["unknown"]} unknown</title></rect>')
    return out


def _cited(results: Results) -> dict[int, list[tuple[str, int]]]:
    """Op index -> the (kind, example number) of the anomalies citing it."""
    cited: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for kind, found in results.anomalies.items():
        for number, anomaly in enumerate(found):
            for index in anomaly.ops:
                cited[index].append((kind, number))
    return cited


def _fault_svg(history: History, axis: _Axis, strip_top: float, top: float,
               bottom: float) -> list[str]:
    colours = _fault_colours(history)
    out = ['<g id="faults">']
    for number, fault in enumerate(sorted(history.faults, key=lambda f: f.start)):
        colour = colours[fault.kind]
        x0 = axis.x(fault.start)
        x1 = axis.x(fault.end) if fault.end is not None else x0
        width = max(2.0, x1 - x0)
        span = f"{fault.start:.1f}s" + (f"{DASH}{fault.end:.1f}s" if fault.end is not None else "")
        label = f"{fault.kind} {fault.target}"
        title = f"<title>{_e(f'{label} {span} {fault.detail}'.strip())}</title>"
        row_y = strip_top + (number % 3) * 12
        fits = x0 + width + 2 + 5.5 * len(label) <= WIDTH  # else to the tag's left
        label_at = (f'x="{x0 + width + 2:.1f}"' if fits
                    else f'x="{x0 - 2:.1f}" text-anchor="end"')
        out.append(
            f'<g class="fault" data-kind="{_e(fault.kind)}">'
            f'<rect class="fault band" data-kind="{_e(fault.kind)}" x="{x0:.1f}" '
            f'y="{top:.1f}" width="{width:.1f}" height="{bottom - top:.1f}" '
            f'fill="{colour}">{title}</rect>'
            f'<rect class="fault-tag" x="{x0:.1f}" y="{row_y:.1f}" width="{width:.1f}" '
            f'height="10" fill="{colour}">{title}</rect>'
            f'<text class="fault-label" {label_at} y="{row_y + 8.5:.1f}">'
            f'{_e(label)}</text></g>')
    out.append("</g>")
    return out


def _marker_svg(ops: dict[int, Op], results: Results, axis: _Axis,
                lanes: _Lanes) -> list[str]:
    out = ['<g id="markers">']
    for kind, found in results.anomalies.items():
        drawn = 0
        for number, anomaly in enumerate(found):
            for index in anomaly.ops:
                op = ops.get(index)
                if op is None or drawn >= MAX_MARKERS_PER_KIND:
                    continue
                drawn += 1
                x = axis.x(op.invoke)
                y = lanes.y[op.process]
                out.append(
                    f'<path class="marker" data-kind="{_e(kind)}" data-example="{number}" '
                    f'data-op="{index}" d="M{x:.1f} {y + 1:.1f}l-4 -7h8z">'
                    f'<title>{_e(kind)}: {_e(anomaly.explanation)} ({_e(op.name)})</title>'
                    f'</path>')
    out.append("</g>")
    return out


def _timeline_svg(history: History, ops: dict[int, Op], results: Results) -> str:
    axis = _Axis(_time_end(history))
    strip_top = 4.0
    top = strip_top + 3 * 12 + 10
    lanes = _lanes((op.process for op in ops.values()), top)
    bottom = max(lanes.bottom, top + 20)
    height = bottom + 20
    cited = _cited(results)
    parts = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
        f'{height:.0f}" width="{WIDTH}" height="{height:.0f}" data-end="{axis.end:.3f}" '
        f'data-mode="{"exact" if len(ops) <= EXACT_BARS else "buckets"}">',
        '<defs><pattern id="hatch" patternUnits="userSpaceOnUse" width="6" height="6" '
        f'patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffe2b8"/>'
        f'<rect width="3" height="6" fill="{OUTCOME_COLOURS["unknown"]}"/></pattern></defs>',
        *_axis_svg(axis, top, bottom),
    ]
    parts.append('<g id="lanes">')
    for process, y in sorted(lanes.y.items()):
        label = f"p{process}" if lanes.height >= 7 else ""
        parts.append(
            f'<g class="lane" data-process="{process}" data-slot="{process // 1000}">'
            f'<rect class="lane-bg" x="{LEFT}" y="{y:.1f}" width="{PLOT_W}" '
            f'height="{lanes.height:.1f}"/><text class="lane-label" x="{LEFT - 6}" '
            f'y="{y + lanes.height - 2:.1f}">{label}</text></g>')
    parts.append("</g>")
    parts.extend(_fault_svg(history, axis, strip_top, top, bottom))
    parts.append('<g id="ops">')
    if len(ops) <= EXACT_BARS:
        parts.extend(_op_bar(i, op, axis, lanes, i in cited) for i, op in ops.items())
    else:
        kept = sorted(i for i, op in ops.items() if i in cited or op.complete is None)
        kept_set = set(kept[:MAX_EXACT_KEPT])
        parts.extend(_buckets(ops, kept_set, axis, lanes))
        parts.extend(_op_bar(i, ops[i], axis, lanes, i in cited) for i in sorted(kept_set))
    parts.append("</g>")
    parts.extend(_marker_svg(ops, results, axis, lanes))
    if history.final is not None and history.final.time > 0:
        x = axis.x(history.final.time)
        parts.append(f'<line class="final" x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" '
                     f'y2="{bottom:.1f}"><title>final read at {history.final.time:.1f}s'
                     f'</title></line>')
    parts.append("</svg>")
    return "\n".join(parts)


def _throughput_svg(history: History) -> str:
    axis = _Axis(_time_end(history))
    bin_s = max(1, math.ceil(axis.end / 600))
    per_bin = Counter(int(op.complete // bin_s) for op in history.ops
                      if op.outcome == "ok" and op.complete is not None)
    top, bottom = 14.0, 104.0
    peak = max(per_bin.values(), default=0) / bin_s
    scale = (bottom - top) / peak if peak else 0.0
    path = [f"M{LEFT} {bottom}"]
    for b in range(int(axis.end // bin_s) + 1):
        rate = per_bin.get(b, 0) / bin_s
        y = bottom - rate * scale
        path.append(f"V{y:.1f}H{axis.x((b + 1) * bin_s):.1f}")
    path.append(f"V{bottom}Z")
    colours = _fault_colours(history)
    bands = "".join(
        f'<rect class="fault band" data-kind="{_e(f.kind)}" x="{axis.x(f.start):.1f}" '
        f'y="{top}" height="{bottom - top}" width="'
        f'{max(2.0, axis.x(f.end if f.end is not None else f.start) - axis.x(f.start)):.1f}" '
        f'fill="{colours[f.kind]}"/>' for f in history.faults)
    return (f'<svg id="throughput" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} 124" '
            f'width="{WIDTH}" height="124" data-peak="{peak:.1f}" data-bin-s="{bin_s}">'
            f'{bands}{"".join(_axis_svg(axis, top, bottom))}'
            f'<path class="rate" d="{"".join(path)}"/>'
            f'<text class="lane-label" x="{LEFT - 6}" y="{top + 8}">{peak:.0f}/s</text>'
            f'<text class="lane-label" x="{LEFT - 6}" y="{bottom}">0</text>'
            f'<text class="chart-title" x="{LEFT + 4}" y="{top - 3}">committed transactions '
            f'per second{"" if bin_s == 1 else f" (mean over {bin_s} s)"}</text></svg>')


# ---- anomaly table ---------------------------------------------------------------------

def _sends_summary(op: Op, shown: int = 3) -> str:
    if not op.sends:
        return "no sends"
    items = [f"{s.tp}@{'?' if s.offset is None else s.offset} {s.value!r}"
             for s in op.sends[:shown]]
    more = f" +{len(op.sends) - shown} more" if len(op.sends) > shown else ""
    return f"sends {', '.join(items)}{more}"


def _polls_summary(op: Op) -> str:
    spans: dict[str, list[int]] = defaultdict(list)
    for poll in op.polls:
        for tp, reads in poll.reads.items():
            spans[tp].extend(offset for offset, _ in reads)
    if not spans:
        return "no polled records"
    return "polled " + ", ".join(f"{tp} {min(o)}..{max(o)} ({len(o)})"
                                 for tp, o in sorted(spans.items()) if o)


def _example(ops: dict[int, Op], anomaly: Anomaly, number: int) -> str:
    where = []
    if anomaly.tp is not None:
        where.append(anomaly.tp + ("" if anomaly.offset is None else f"@{anomaly.offset}"))
    if anomaly.value is not None:
        where.append(repr(anomaly.value))
    cited = []
    for index in anomaly.ops:
        op = ops.get(index)
        if op is None:
            cited.append(f"<li>op #{index} (not in the history)</li>")
            continue
        cited.append(
            f'<li data-op="{index}"><b>{_e(op.name)}</b> <span class="{op.outcome}-text">'
            f'{op.outcome}</span> {_fmt_time(op.invoke)} → {_fmt_time(op.complete)} '
            f'[{_e(op.client)}] — {_e(_sends_summary(op))}; {_e(_polls_summary(op))}</li>')
    return (f'<div class="example" data-example="{number}"><div>{_e(anomaly.explanation)}'
            f'{" — " + _e(" ".join(where)) if where else ""}</div>'
            f'<ul>{"".join(cited)}</ul></div>')


def _anomaly_table(ops: dict[int, Op], results: Results) -> str:
    kinds = list(ANOMALY_KINDS) + sorted(set(results.anomalies) - set(ANOMALY_KINDS))
    rows = []
    for kind in kinds:
        found = results.anomalies.get(kind, [])
        failure = kind not in NOT_FAILURES
        examples = "".join(_example(ops, a, n) for n, a in enumerate(found[:EXAMPLES]))
        if len(found) > EXAMPLES:
            examples += (f'<div class="more">and {len(found) - EXAMPLES} more '
                         f'in results.json</div>')
        state = "none" if not found else "failure" if failure else "reported"
        rows.append(
            f'<tr class="{state}" data-kind="{_e(kind)}" data-count="{len(found)}" '
            f'data-failure="{"true" if failure else "false"}"><td class="kind">{_e(kind)}</td>'
            f'<td class="count">{len(found)}</td><td>{"yes" if failure else "no"}</td>'
            f'<td>{_e(DESCRIPTIONS.get(kind, ""))}</td><td>{examples or "—"}</td></tr>')
    return ('<table id="anomalies"><thead><tr><th>class</th><th>count</th><th>failure</th>'
            '<th>what it means</th><th>examples (operations involved)</th></tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


# ---- totals ----------------------------------------------------------------------------

TOTAL_LABELS = (
    ("ops", "operations (transactions attempted)"), ("txns", "transactions by outcome"),
    ("sends", "records sent"), ("polled_records", "records polled"),
    ("faults", "faults by kind"), ("final_records", "records in the final read"),
    ("duration_s", "duration (s)"), ("clients", "operations per client"),
)


def _total_value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_total_value(v)}" for k, v in value.items()) or "none"
    if isinstance(value, float):
        return f"{value:.1f}"
    return str(value)


def _totals_table(results: Results) -> str:
    keys = [k for k, _ in TOTAL_LABELS] + sorted(set(results.totals) - {k for k, _ in TOTAL_LABELS})
    labels = dict(TOTAL_LABELS)
    rows = "".join(
        f'<tr data-key="{_e(k)}"><th>{_e(labels.get(k, k))}</th>'
        f'<td>{_e(_total_value(results.totals.get(k)))}</td></tr>' for k in keys)
    return f'<table id="totals"><tbody>{rows}</tbody></table>'


def _e(text: str) -> str:
    return html.escape(text, quote=True)


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:20px;color:#222;
 max-width:1240px}
h1{margin:0 0 6px;font-size:22px}h2{font-size:17px;margin:22px 0 6px}
.verdict{font-size:18px;font-weight:600;padding:6px 10px;border-radius:4px;display:inline-block}
.verdict.valid{background:#e3f4e8;color:#17602f}.verdict.invalid{background:#fde2e1;color:#a10000}
dl.info{display:grid;grid-template-columns:max-content 1fr max-content 1fr;gap:2px 12px;
 margin:10px 0}
dl.info dt{color:#666}dl.info dd{margin:0}
pre{background:#f4f4f4;padding:6px 8px;white-space:pre-wrap;word-break:break-all}
svg{display:block;width:100%;height:auto;font-size:10px}
.grid{stroke:#e4e4e4}.tick{fill:#666;text-anchor:middle}
.lane-bg{fill:#fafafa}.lane-label{fill:#555;text-anchor:end;font-size:9px}
.chart-title{fill:#333;font-size:11px}
.op.ok,.bucket.ok{fill:#2e9d4f}.op.fail,.bucket.fail{fill:#a0a4a8}
.op.unknown,.bucket.unknown{fill:#f08c00}.op.open{fill:url(#hatch)}
.op.cited{stroke:#e00000;stroke-width:1.2}
.band{opacity:.16}.fault-label{fill:#333;font-size:9px}
.marker{fill:#e00000;stroke:#fff;stroke-width:.5}.marker.hl{fill:#000;stroke:#e00000}
.final{stroke:#333;stroke-dasharray:4 3}
.rate{fill:#2e9d4f;opacity:.85}
.hide-ok .ok,.hide-fail .fail,.hide-unknown .unknown,.hide-fault .fault,
 .hide-marker .marker{display:none}
.filters label{margin-right:12px}.legend{margin-left:16px;color:#444}
.swatch{display:inline-block;width:12px;height:10px;margin:0 4px 0 10px;vertical-align:middle}
.swatch.hatch{background:repeating-linear-gradient(45deg,#f08c00 0 3px,#ffe2b8 3px 6px)}
.detail{min-height:20px;color:#333;background:#f7f7f7;padding:4px 8px;margin:4px 0;
 font-family:ui-monospace,monospace;font-size:12px}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #e2e2e2;padding:4px 6px;text-align:left;vertical-align:top}
#anomalies tr.none td{color:#999}#anomalies tr.failure td.kind{color:#c00000;font-weight:600}
#anomalies tr.reported td.kind{color:#8a6d00;font-weight:600}
#anomalies tr.found-hl{background:#fff4f4}
#anomalies tr.failure,#anomalies tr.reported{cursor:pointer}
.example{margin-bottom:6px}.example ul{margin:2px 0 0 16px;padding:0;font-size:12px}
.ok-text{color:#2e9d4f}.fail-text{color:#777}.unknown-text{color:#c66f00}
#totals th{width:40%;font-weight:normal;color:#555}
"""

_JS = """
(function(){
  var timeline=document.getElementById('timeline'),detail=document.getElementById('detail');
  document.querySelectorAll('#filters input[data-hide]').forEach(function(box){
    box.addEventListener('change',function(){
      var cls='hide-'+box.dataset.hide;
      [timeline,document.getElementById('throughput')].forEach(function(svg){
        svg.classList.toggle(cls,!box.checked);});
    });
  });
  function show(e){
    var t=e.target.closest('[data-op],.bucket,.fault,.marker,.final');
    var title=t&&t.querySelector('title');
    if(title){detail.textContent=title.textContent;}
  }
  timeline.addEventListener('mouseover',show);
  document.querySelectorAll('#anomalies tbody tr').forEach(function(row){
    row.addEventListener('click',function(){
      var on=!row.classList.contains('found-hl');
      document.querySelectorAll('#anomalies tr.found-hl').forEach(function(r){
        r.classList.remove('found-hl');});
      timeline.querySelectorAll('.marker.hl').forEach(function(m){m.classList.remove('hl');});
      if(!on){return;}
      row.classList.add('found-hl');
      var hit=timeline.querySelectorAll('.marker[data-kind="'+row.dataset.kind+'"]');
      hit.forEach(function(m){m.classList.add('hl');});
      if(hit.length){timeline.scrollIntoView({behavior:'smooth'});}
    });
  });
})();
"""
