"""The verify report page, parsed: self-contained HTML with balanced tags, a lane per
worker process, the fault bands, the anomaly rows with their examples, the totals; and a
30-minute history of 100k transactions stays a small page (buckets, not bars)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from oncelog.verify.history import ANOMALY_KINDS, Results, results_json
from oncelog.verify.report import EXACT_BARS, write_report
from tests.support.verify_history import small_history, synthetic_history

VOID = {"meta", "br", "input", "img", "hr", "link"}


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    within: tuple[str, ...]  # the ids of its ancestors, outermost first
    text: list[str] = field(default_factory=list)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def content(self) -> str:
        return "".join(self.text)


class Page(HTMLParser):
    """Every element with its attributes, ancestors' ids and text; fails on a closing tag
    that does not match the open one (the page is built from strings)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.elements: list[Element] = []
        self.stack: list[Element] = []
        self.feed(text)
        self.close()
        assert [e.tag for e in self.stack] == [], "unclosed elements"

    def _element(self, tag: str, attrs: list[tuple[str, str | None]]) -> Element:
        within = tuple(e.attrs["id"] for e in self.stack if "id" in e.attrs)
        element = Element(tag, {k: v or "" for k, v in attrs}, within)
        self.elements.append(element)
        return element

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = self._element(tag, attrs)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._element(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1].tag == tag, f"</{tag}> closes {self.stack[-1:]}"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        for element in self.stack:
            element.text.append(data)

    def select(self, tag: str, cls: str | None = None, within: str | None = None) -> list[Element]:
        return [e for e in self.elements if e.tag == tag
                and (cls is None or cls in e.classes) and (within is None or within in e.within)]

    def by_id(self, element_id: str) -> Element:
        [element] = [e for e in self.elements if e.attrs.get("id") == element_id]
        return element


def render(tmp_path: Path) -> tuple[Page, Results]:
    history, results = small_history()
    path = write_report(tmp_path, history, results)
    assert path == tmp_path / "report.html"
    return Page(path.read_text()), results


def test_writes_the_page_and_results_json(tmp_path: Path) -> None:
    history, results = small_history()
    write_report(tmp_path / "run", history, results)
    assert (tmp_path / "run" / "report.html").stat().st_size > 0
    written = json.loads((tmp_path / "run" / "results.json").read_text())
    assert written == json.loads(json.dumps(results_json(results)))
    assert written["counts"] == {"aborted-read": 1, "duplicate": 7, "G0": 1}


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    for element in page.elements:
        for name in ("src", "href", "xlink:href", "action"):
            assert element.attrs.get(name, "#").startswith("#"), (element.tag, element.attrs)
    assert not page.select("link")
    assert all("src" not in e.attrs for e in page.select("script"))


def test_header_shows_the_verdict_and_the_run(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    verdict = page.by_id("verdict")
    assert verdict.attrs["data-valid"] == "false"
    assert "aborted-read" in verdict.content() and "duplicate" in verdict.content()
    assert "not failures: G0" in verdict.content()
    assert page.by_id("command").content().startswith("oncelog verify --spawn single")
    fields = {e.attrs["data-field"]: e.content() for e in page.select("dd")}
    assert fields["seed"] == "7" and fields["broker"] == "oncelog"
    assert fields["final read"] == "7 records, complete"


def test_a_valid_run_says_so(tmp_path: Path) -> None:
    history, results = small_history()
    page = Page(write_report(tmp_path, history, Results(True, {}, results.totals)).read_text())
    assert page.by_id("verdict").attrs["data-valid"] == "true"
    assert page.by_id("verdict").content() == "Valid: no anomalies"
    assert not page.select("path", "marker")


def test_text_from_the_history_is_escaped(tmp_path: Path) -> None:
    history, results = small_history()
    history.info.command = "oncelog verify --report '<script>alert(1)</script>'"
    history.ops[0].client = "<b>evil</b>"
    page = Page(write_report(tmp_path, history, results).read_text())
    assert page.by_id("command").content() == history.info.command
    assert not page.select("b", within="timeline")
    assert len(page.select("script")) == 1


def test_one_lane_per_process_grouped_by_slot(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    lanes = page.select("g", "lane", within="timeline")
    assert [(e.attrs["data-process"], e.attrs["data-slot"]) for e in lanes] == [
        ("0", "0"), ("1", "0"), ("1000", "1"), ("1001", "1")]
    tops = [float(e.attrs["y"]) for e in page.select("rect", "lane-bg")]
    assert tops[2] - tops[1] > tops[1] - tops[0]  # a gap between slots


def test_every_op_is_a_bar_coloured_by_outcome(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    bars = page.select("rect", "op", within="timeline")
    assert sorted(int(e.attrs["data-op"]) for e in bars) == list(range(7))
    outcome = {int(e.attrs["data-op"]): e.classes & {"ok", "fail", "unknown"} for e in bars}
    assert outcome == {0: {"ok"}, 1: {"fail"}, 2: {"unknown"}, 3: {"ok"}, 4: {"ok"},
                       5: {"unknown"}, 6: {"ok"}}
    [never_completed] = [e for e in bars if "open" in e.classes]
    assert never_completed.attrs["data-op"] == "2"
    assert all(float(e.attrs["width"]) >= 1 and float(e.attrs["height"]) > 0 for e in bars)
    # The one that never completed runs to the end of the chart (the final read at 9 s).
    ends = [float(e.attrs["x"]) + float(e.attrs["width"]) for e in bars]
    assert float(never_completed.attrs["x"]) + float(never_completed.attrs["width"]) == max(ends)
    assert {e.attrs["data-op"] for e in bars if "cited" in e.classes} == {"0", "1", "4", "6"}


def test_fault_bands_one_per_fault(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    bands = page.select("rect", "band", within="faults")
    assert sorted(e.attrs["data-kind"] for e in bands) == ["client-crash", "cut", "kill", "pause"]
    kill = next(e for e in bands if e.attrs["data-kind"] == "kill")
    pause = next(e for e in bands if e.attrs["data-kind"] == "pause")
    assert float(kill.attrs["width"]) > float(pause.attrs["width"]) > 0  # 1.5 s vs 0.8 s
    labels = [e.content() for e in page.select("text", "fault-label")]
    assert "kill broker-0" in labels and "client-crash worker-0" in labels
    assert len(page.select("rect", "band", within="throughput")) == 4


def test_anomaly_markers_on_the_ops_they_cite(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    markers = page.select("path", "marker", within="timeline")
    assert sorted((e.attrs["data-kind"], e.attrs["data-op"]) for e in markers) == sorted(
        [("aborted-read", "1"), ("aborted-read", "6"), ("G0", "0"), ("G0", "4")]
        + [("duplicate", "0")] * 7)


def test_anomaly_table_has_a_row_per_class(tmp_path: Path) -> None:
    page, results = render(tmp_path)
    rows = page.select("tr", within="anomalies")[1:]  # after the header
    assert [e.attrs["data-kind"] for e in rows] == list(ANOMALY_KINDS)
    counts = {e.attrs["data-kind"]: int(e.attrs["data-count"]) for e in rows}
    assert counts == {k: len(results.anomalies.get(k, [])) for k in ANOMALY_KINDS}
    failure = {e.attrs["data-kind"]: e.attrs["data-failure"] for e in rows}
    assert failure["G0"] == "false" and failure["aborted-read"] == "true"
    by_kind = {e.attrs["data-kind"]: e for e in rows}
    assert "reported" in by_kind["G0"].classes and "failure" in by_kind["duplicate"].classes
    assert "none" in by_kind["lost-write"].classes
    aborted = by_kind["aborted-read"].content()
    assert "p0#1" in aborted and "p1001#0" in aborted and "verify-7-in/0@1" in aborted
    examples = [e for e in page.select("div", "example") if "anomalies" in e.within]
    assert len(examples) == 1 + 5 + 1  # duplicate: five shown of seven
    assert "and 2 more in results.json" in by_kind["duplicate"].content()


def test_totals(tmp_path: Path) -> None:
    page, _ = render(tmp_path)
    rows = {e.attrs["data-key"]: e.content() for e in page.select("tr", within="totals")}
    assert list(rows) == ["ops", "txns", "sends", "polled_records", "faults",
                          "final_records", "duration_s", "clients"]
    assert rows["ops"].endswith("7")
    assert "ok: 4" in rows["txns"] and "unknown: 2" in rows["txns"] and "fail: 1" in rows["txns"]
    assert "kill: 1" in rows["faults"] and "client-crash: 1" in rows["faults"]
    assert "oncelog: 4" in rows["clients"] and "confluent-kafka: 3" in rows["clients"]


def test_a_30_minute_history_of_100k_ops_stays_small(tmp_path: Path) -> None:
    history, results = synthetic_history(seed=3, duration_s=1800, rate=20)
    assert len(history.ops) > 100_000 > EXACT_BARS
    text = write_report(tmp_path, history, results).read_text()
    assert len(text.encode()) < 5_000_000
    page = Page(text)
    assert page.by_id("timeline").attrs["data-mode"] == "buckets"
    buckets = page.select("rect", "bucket", within="timeline")
    assert len(buckets) > 1000
    aggregated = sum(int(e.attrs[f"data-{k}"]) for e in buckets for k in ("ok", "fail", "unknown"))
    bars = page.select("rect", "op", within="timeline")
    assert aggregated + len(bars) == len(history.ops)
    never_completed = {str(op.index) for op in history.ops if op.complete is None}
    cited = {str(i) for found in results.anomalies.values() for a in found for i in a.ops}
    assert never_completed and {e.attrs["data-op"] for e in bars} == never_completed | cited
    processes = {str(op.process) for op in history.ops}
    assert {e.attrs["data-process"] for e in page.select("g", "lane")} == processes
