"""Render the verify report of a synthetic but realistic history and screenshot it in
headless chromium: the picture in docs until the real runs' figures replace it.

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
    data = page.call("Page.captureScreenshot", format="png",
                     clip={"x": 0, "y": 0, "width": width, "height": height, "scale": 1})
    return base64.b64decode(data["data"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/images/verify-report.png"))
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--height", type=int, default=1400)
    args = parser.parse_args()
    history, results = synthetic_history(args.seed, args.duration)
    with tempfile.TemporaryDirectory(prefix="oncelog-verify-report-") as tmp:
        page_path = write_report(Path(tmp), history, results)
        with chromium_page(page_path.as_uri()) as page:
            page.wait_for("document.readyState === 'complete'")
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_bytes(screenshot(page, 1280, args.height))
    print(f"{args.out}: {len(history.ops)} ops, {len(history.faults)} faults")


if __name__ == "__main__":
    main()
