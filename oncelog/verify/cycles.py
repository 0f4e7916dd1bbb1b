"""The dependency graph between a verify run's transactions, and its cycle search.

Vertices are operations (positions in the history); an edge ``a -> b`` carries one or more
kinds, each with the evidence for it (the first one given is kept; the caller formats it,
so that the million edges of a long run cost no strings):

- ``ww``: a wrote a record of a partition immediately before b's record in the final
  read's order, the two transactions overlapping in time;
- ``ww-realtime``: the same, and a had completed (committed) before b was invoked;
- ``wr``: b polled a record a wrote.

The checker (``checker.py``) explains which cycles are anomalies in Kafka's model; this
module only finds them. The search is bounded for histories of ~100k operations: the
strongly connected components are found in linear time and each component yields at most
one cycle, so counts are of components, not of the (exponentially many) cycles.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise

import networkx as nx

WW = "ww"
WW_REALTIME = "ww-realtime"
WR = "wr"

# what shows an edge: the records involved, as the caller chose to describe them
Evidence = tuple[object, ...]


@dataclass(frozen=True)
class Step:
    """One edge of a cycle: ``src`` -> ``dst`` because of ``kind``, shown by ``evidence``."""
    src: int
    dst: int
    kind: str
    evidence: Evidence


@dataclass(frozen=True)
class CycleSearch:
    """``components``: how many strongly connected components hold a matching cycle;
    ``cycles``: one cycle for each of the first ``limit`` of them."""
    components: int
    cycles: list[list[Step]]


class DependencyGraph:
    def __init__(self) -> None:
        self._edges: dict[tuple[int, int], dict[str, Evidence]] = {}

    def add(self, src: int, dst: int, kind: str, evidence: Evidence) -> None:
        """Add an edge (self-edges are dropped: an operation does not depend on itself)."""
        if src != dst:
            self._edges.setdefault((src, dst), {}).setdefault(kind, evidence)

    def edge_kinds(self, src: int, dst: int) -> dict[str, Evidence]:
        return dict(self._edges.get((src, dst), {}))

    def search(self, kinds: frozenset[str], through: str | None, limit: int) -> CycleSearch:
        """Cycles over edges of ``kinds`` only; with ``through``, only cycles holding at
        least one edge of that kind (``through`` must be one of ``kinds``)."""
        graph = nx.DiGraph()
        graph.add_edges_from(edge for edge, have in self._edges.items() if kinds & have.keys())
        components = 0
        cycles: list[list[Step]] = []
        for component in nx.strongly_connected_components(graph):
            if len(component) < 2:
                continue
            sub = graph.subgraph(component)
            if through is None:
                path = [edge[:2] for edge in nx.find_cycle(sub)]
            else:
                first = next(self._edges_of(sub.edges, through), None)
                if first is None:
                    continue
                src, dst = first
                back = nx.shortest_path(sub, dst, src)
                path = [(src, dst), *pairwise(back)]
            components += 1
            if len(cycles) < limit:
                cycles.append([self._step(src, dst, kinds, through) for src, dst in path])
        return CycleSearch(components, cycles)

    def _edges_of(self, edges: Iterator[tuple[int, int]], kind: str) -> Iterator[tuple[int, int]]:
        return (edge for edge in edges if kind in self._edges[edge])

    def _step(self, src: int, dst: int, kinds: frozenset[str], prefer: str | None) -> Step:
        have = self._edges[(src, dst)]
        kind = prefer if prefer in have else min(kinds & have.keys())
        assert kind is not None
        return Step(src, dst, kind, have[kind])
