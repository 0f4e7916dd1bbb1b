"""``oncelog metrics``: fetch a broker's ``/metrics`` (``oncelog serve --metrics``) and print
it as a table. Partitions of internal topics are left out unless ``--internal``."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass

from oncelog.cli.common import CommandError, print_table, run_command

DEFAULT_URL = "http://127.0.0.1:9464/metrics"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    labels: dict[str, str]
    value: str


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("metrics", help="print a broker's metrics (serve --metrics)")
    p.add_argument("--url", default=DEFAULT_URL,
                   help=f"the broker's metrics endpoint (default {DEFAULT_URL})")
    p.add_argument("--grep", default=None, metavar="TEXT",
                   help="only metrics whose name contains TEXT")
    p.add_argument("--internal", action="store_true",
                   help="include partitions of internal topics")
    p.add_argument("--raw", action="store_true", help="print the Prometheus text as served")
    p.add_argument("--timeout-ms", type=int, default=10000, metavar="MS",
                   help="give up on the HTTP request after this long")
    p.set_defaults(handler=cmd_metrics)


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, "metrics")


def _unescape(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            out.append("\n" if nxt == "n" else nxt)
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    i = 0
    while i < len(text):
        eq = text.index("=", i)
        key = text[i:eq].strip().lstrip(",").strip()
        if text[eq + 1] != '"':
            raise ValueError(f"label {key} has no quoted value")
        j = eq + 2
        while text[j] != '"':
            j += 2 if text[j] == "\\" else 1
        labels[key] = _unescape(text[eq + 2:j])
        i = j + 1
        while i < len(text) and text[i] in ", ":
            i += 1
    return labels


def parse(text: str) -> list[Metric]:
    """Samples of a Prometheus text exposition (comments skipped)."""
    metrics = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            if "{" in line:
                name, rest = line.split("{", 1)
                inner, _, tail = rest.rpartition("}")
                labels = _parse_labels(inner)
            else:
                name, _, tail = line.partition(" ")
                labels = {}
            value = tail.split()[0]
        except (ValueError, IndexError):
            raise CommandError(f"line {number} is not Prometheus text: {line!r}") from None
        metrics.append(Metric(name.strip(), labels, value))
    return metrics


def fetch_text(url: str, timeout_ms: int) -> str:
    """The Prometheus text a broker's metrics endpoint serves (CommandError when it
    cannot be fetched)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_ms / 1000) as response:
            return str(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        raise CommandError(f"{url} answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CommandError(f"cannot fetch {url}: {reason}") from None


def cmd_metrics(args: argparse.Namespace) -> int:
    text = fetch_text(args.url, args.timeout_ms)
    if args.raw:
        sys.stdout.write(text)
        return 0
    rows = []
    for m in parse(text):
        if args.grep and args.grep not in m.name:
            continue
        if not args.internal and m.labels.get("topic", "").startswith("__"):
            continue
        labels = " ".join(f"{k}={v}" for k, v in m.labels.items())
        rows.append((m.name, labels or "-", m.value))
    print_table(("Metric", "Labels", "Value"), rows)
    return 0
