"""Screenshot a verify report in headless chromium: a real run's (``--report DIR``, the
picture in docs is the 30-minute single-node run of bench/verify_runs.py) or one rendered
from a synthetic but realistic history.

    python -m bench.verify_screenshot --report /tmp/oncelog-verify-runs/single
    python -m bench.verify_screenshot [--out docs/images/verify-report.png] [--duration 120]
"""

from __future__ import annotations

import argparse
import base64
import tempfile
from pathlib import Path

from oncelog.verify.report import write_report
from tests.support.chromium import Page, chromium_page
from tests.support.verify_history import synthetic_history


def screenshot(page: Page, width: int, height: int) -> bytes:
    """The page's top ``width`` x ``height`` CSS pixels as a PNG."""
    page.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
              deviceScaleFactor=1, mobile=False)
    # Two animation frames: the page is laid out and painted at the new size.
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
    data = page.call("Page.captureScreenshot", format="png",
                     clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
    return base64.b64decode(data["data"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images/verify-report.png"))
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--height", type=int, default=1400)
    parser.add_argument("--report", type=Path, default=None,
                        help="the directory of a real run (its report.html)")
    args = parser.parse_args()
    if args.report is not None:
        capture(args.report / "report.html", args.out, args.height)
        print(f"{args.out}: {args.report / 'report.html'}")
        return
    history, results = synthetic_history(args.seed, args.duration)
    with tempfile.TemporaryDirectory(prefix="oncelog-verify-report-") as tmp:
        capture(write_report(Path(tmp), history, results), args.out, args.height)
    print(f"{args.out}: {len(history.ops)} ops, {len(history.faults)} faults")


def capture(page_path: Path, out: Path, height: int) -> None:
    with chromium_page(page_path.resolve().as_uri()) as page:
        page.wait_for("document.readyState === 'complete'"
                      " && document.getElementById('totals')")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(screenshot(page, 1280, height))


if __name__ == "__main__":
    main()
