"""Profiles of the oncelog broker: py-spy folded stacks (or cProfile), summary, flame graph.

py-spy writes "raw" (folded) stacks: one line per distinct stack, frames joined by ``;``
from the root, then a space and the sample count — the input format of flamegraph tools.
``summarise`` turns them into self/total sample shares per function, ``flamegraph_svg``
into a plain SVG flame graph.
"""

from __future__ import annotations

import html
import pstats
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FunctionShare:
    function: str
    self_share: float
    total_share: float


def read_folded(paths: Iterable[Path]) -> Counter[tuple[str, ...]]:
    stacks: Counter[tuple[str, ...]] = Counter()
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if stack and count.isdigit():
                stacks[tuple(stack.split(";"))] += int(count)
    return stacks


def summarise(stacks: Counter[tuple[str, ...]], top: int = 20) -> list[FunctionShare]:
    """The functions with most samples on top of the stack (self), with their total share."""
    total = sum(stacks.values())
    if total == 0:
        return []
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    for stack, count in stacks.items():
        own[stack[-1]] += count
        for frame in set(stack):
            inclusive[frame] += count
    return [
        FunctionShare(name, own[name] / total, inclusive[name] / total)
        for name, _ in own.most_common(top)
    ]


def summarise_cprofile(path: Path, top: int = 20) -> list[FunctionShare]:
    stats = pstats.Stats(str(path))
    table = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in table.values()) or 1.0
    rows = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:top]
    return [
        FunctionShare(f"{func} ({Path(file).name}:{line})", entry[2] / total, entry[3] / total)
        for (file, line, func), entry in rows
    ]


def flamegraph_svg(stacks: Counter[tuple[str, ...]], title: str, width: int = 1600) -> str:
    """A static flame graph (hover a box for its function and share)."""
    total = sum(stacks.values())
    tree: dict[str, object] = {}
    counts: dict[tuple[str, ...], int] = Counter()
    for stack, count in stacks.items():
        for depth in range(1, len(stack) + 1):
            counts[stack[:depth]] += count
    for stack in counts:
        node = tree
        for frame in stack:
            node = node.setdefault(frame, {})  # type: ignore[assignment]
    row = 16
    depth_max = max((len(s) for s in counts), default=0)
    height = (depth_max + 2) * row
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="monospace" font-size="11">',
        f'<text x="4" y="12">{html.escape(title)} — {total} samples</text>',
    ]

    def walk(node: dict[str, object], prefix: tuple[str, ...], x: float, depth: int) -> None:
        for frame in sorted(node):
            path = (*prefix, frame)
            share = counts[path] / total if total else 0.0
            w = share * width
            if w >= 0.5:
                y = height - (depth + 1) * row
                hue = 20 + (zlib.crc32(frame.encode()) % 40)
                label = html.escape(f"{frame} ({share:.1%})")
                out.append(
                    f'<g><title>{label}</title><rect x="{x:.1f}" y="{y}" width="{w:.1f}" '
                    f'height="{row - 1}" fill="hsl({hue},90%,60%)"/>'
                )
                if w > 40:
                    chars = int(w / 7)
                    out.append(f'<text x="{x + 2:.1f}" y="{y + 11}">'
                               f"{html.escape(frame[:chars])}</text>")
                out.append("</g>")
                child = node[frame]
                assert isinstance(child, dict)
                walk(child, path, x, depth + 1)
            x += w

    walk(tree, (), 0.0, 0)
    out.append("</svg>")
    return "\n".join(out)


def markdown(rows: list[FunctionShare], heading: str) -> str:
    lines = [heading, "", "| function | self | total |", "|---|---:|---:|"]
    for r in rows:
        name = r.function.replace("|", "\\|")
        lines.append(f"| `{name}` | {r.self_share:.1%} | {r.total_share:.1%} |")
    return "\n".join(lines)
