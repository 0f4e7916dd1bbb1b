"""The verify report in headless chromium (Debian's): opened from disk (file://), the
timeline draws a lane per worker process and visible bars (or buckets), the fault bands
are there, the anomaly table matches the results, the filters and the row highlight work,
and the page logs no error. A screenshot of each page is left in the test's tmp dir."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from oncelog.verify.history import ANOMALY_KINDS, History, Results
from oncelog.verify.report import EXACT_BARS, write_report
from tests.support.chromium import Page, chromium_page
from tests.support.verify_history import small_history, synthetic_history

Build = Callable[[], tuple[History, Results]]

HISTORIES: dict[str, Build] = {
    "small": small_history,
    "bucketed": lambda: synthetic_history(seed=11, duration_s=300),
}

# Every drawn op bar / bucket with its rendered size (zero when not drawn or hidden).
SIZES = """[...document.querySelectorAll('#timeline rect.op, #timeline rect.bucket')].map(
  r => { const b = r.getBoundingClientRect();
         return {op: r.dataset.op || null, bucket: r.classList.contains('bucket'),
                 n: r.classList.contains('bucket') ? (+r.dataset.ok + +r.dataset.fail
                    + +r.dataset.unknown) : 1, w: b.width, h: b.height}; })"""


def open_report(page: Page, url: str) -> None:
    page.call("Runtime.enable")
    page.call("Log.enable")
    page.call("Page.navigate", url=url)
    page.wait_for("document.readyState === 'complete' && document.getElementById('totals')")


@pytest.mark.parametrize("name", list(HISTORIES))
def test_report_renders_in_chromium(name: str, tmp_path: Path) -> None:
    history, results = HISTORIES[name]()
    report = write_report(tmp_path / "report", history, results)
    with chromium_page("about:blank") as page:
        open_report(page, report.as_uri())
        (tmp_path / f"{name}.png").write_bytes(page.screenshot())

        processes = sorted({op.process for op in history.ops})
        lanes = page.evaluate("[...document.querySelectorAll('#timeline g.lane')]"
                              ".map(g => +g.dataset.process)")
        assert lanes == processes

        sizes = page.evaluate(SIZES)
        assert sizes and all(s["w"] > 0 and s["h"] > 0 for s in sizes), sizes[:5]
        assert sum(s["n"] for s in sizes) == len(history.ops)
        if len(history.ops) <= EXACT_BARS:
            assert not any(s["bucket"] for s in sizes)
        else:
            assert sum(s["bucket"] for s in sizes) > 100
        # The bars sit inside the chart.
        assert page.evaluate(
            "(() => { const c = document.getElementById('timeline').getBoundingClientRect();"
            " return [...document.querySelectorAll('#timeline rect.op, #timeline rect.bucket')]"
            ".every(r => { const b = r.getBoundingClientRect();"
            " return b.left >= c.left - 0.5 && b.right <= c.right + 0.5"
            " && b.top >= c.top && b.bottom <= c.bottom; }); })()") is True

        bands = page.evaluate(
            "[...document.querySelectorAll('#timeline #faults rect.band')].map(r =>"
            " ({kind: r.dataset.kind, w: r.getBoundingClientRect().width,"
            "  h: r.getBoundingClientRect().height}))")
        assert sorted(b["kind"] for b in bands) == sorted(f.kind for f in history.faults)
        assert all(b["w"] > 0 and b["h"] > 0 for b in bands)

        rows = page.evaluate(
            "[...document.querySelectorAll('#anomalies tbody tr')].map(r =>"
            " [r.dataset.kind, +r.dataset.count, r.querySelector('.count').textContent])")
        counts = {k: len(results.anomalies.get(k, [])) for k in ANOMALY_KINDS}
        assert rows == [[k, n, str(n)] for k, n in counts.items()]
        markers = page.evaluate(
            "[...document.querySelectorAll('#timeline path.marker')].filter(m =>"
            " m.getBoundingClientRect().width > 0).length")
        assert markers == sum(len(a.ops) for found in results.anomalies.values() for a in found)
        assert page.evaluate("document.getElementById('verdict').dataset.valid") == (
            "true" if results.valid else "false")

        # Filters hide a class of bars; a row click highlights its markers.
        page.evaluate("document.querySelector('#filters input[data-hide=\"ok\"]').click()")
        hidden = page.evaluate(SIZES)
        assert [s for s in hidden if s["w"] > 0] and all(
            s["w"] == 0 for s, before in zip(hidden, sizes, strict=True)
            if before["op"] is not None and history.ops[int(before["op"])].outcome == "ok")
        kind = next(k for k in ANOMALY_KINDS if results.anomalies.get(k))
        page.evaluate(f"document.querySelector('#anomalies tr[data-kind={json.dumps(kind)}]')"
                      ".click()")
        assert page.evaluate(f"document.querySelectorAll('#timeline path.marker.hl"
                             f"[data-kind={json.dumps(kind)}]').length") > 0
        page.evaluate("document.querySelector('#timeline rect.op').dispatchEvent("
                      "new MouseEvent('mouseover', {bubbles: true}))")
        assert page.evaluate("document.getElementById('detail').textContent").startswith("p")

        assert page.console_errors() == []
