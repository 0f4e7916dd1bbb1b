"""Seeded fault schedules for ``oncelog verify`` (sans-IO: no clock, no processes).

``plan(seed, duration_s, kinds, deployment_kind)`` is the whole schedule of a run, decided
before it starts, so the same seed reproduces it: after a warm-up of ``WARM_UP_S`` a fault
every ``GAP_S`` (uniform), each held ``HOLD_S`` (uniform; a client crash is instantaneous),
the last one healed at least ``QUIET_END_S`` before the run ends so the workload can show
that the system recovered. Faults that hit brokers never overlap (a 3-broker cluster keeps
a majority and ``min.insync.replicas=2``) and come ``RECOVER_S`` apart at least; a client
crash may fall inside one.

The kinds, and what the injector (``nemesis.py``) does for each:

- ``kill``: kill -9 a broker, restart it after the hold;
- ``pause``: SIGSTOP a broker, SIGCONT after the hold;
- ``client-crash``: kill -9 one client worker (the runner restarts it as a new process);
- ``cut``: through a broker's fault proxy, cut its current connections and, for the hold,
  one of: drop the next responses to Produce / EndTxn / AddPartitionsToTxn /
  TxnOffsetCommit, cut every connection after a few kilobytes, refuse connections
  (``cut_mode``);
- ``leader-kill`` (cluster): kill -9 the leader of a random partition of the run's topics;
- ``coordinator-kill`` (cluster): kill -9 the transaction coordinator of a random worker's
  transactional id;
- ``partition`` (cluster in network namespaces): isolate one broker from the other brokers
  and etcd, or cut one pair of brokers (``partition_mode``).

``PlannedFault.pick`` is a seeded number the injector turns into the fault's target (which
broker, partition, worker, mode) once it sees the deployment's state at that moment.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

WARM_UP_S = 5.0
GAP_S = (6.0, 15.0)
HOLD_S = (2.0, 8.0)
QUIET_END_S = 10.0
RECOVER_S = 1.0  # at least this long between one broker fault's heal and the next fault

SINGLE_KINDS: tuple[str, ...] = ("kill", "pause", "client-crash", "cut")
CLUSTER_KINDS: tuple[str, ...] = (*SINGLE_KINDS, "leader-kill", "coordinator-kill")
NETNS_KINDS: tuple[str, ...] = ("partition",)
EXTERNAL_KINDS: tuple[str, ...] = ("client-crash",)
ALL_KINDS: tuple[str, ...] = (*CLUSTER_KINDS, *NETNS_KINDS)
INSTANT_KINDS: frozenset[str] = frozenset({"client-crash"})
"""Kinds that touch no broker and take no time; every other kind is a broker fault."""

CUT_MODES: tuple[str, ...] = ("drop-responses", "cut-after-bytes", "refuse")
PARTITION_MODES: tuple[str, ...] = ("isolate", "pair")


class UnsupportedFault(ValueError):
    """A fault kind the deployment cannot inject; the message says which ones it can."""


@dataclass(frozen=True)
class PlannedFault:
    at_s: float  # seconds after the run started
    kind: str
    hold_s: float  # 0 for an instantaneous fault
    pick: int  # the seeded choice of target, see the module docstring

    @property
    def end_s(self) -> float:
        return self.at_s + self.hold_s

    @property
    def hits_broker(self) -> bool:
        return self.kind not in INSTANT_KINDS


def supported_kinds(deployment_kind: str, *, netns: bool = False) -> tuple[str, ...]:
    """The fault kinds a deployment of that kind can inject (``partition`` needs the
    brokers in network namespaces)."""
    if deployment_kind == "single":
        return SINGLE_KINDS
    if deployment_kind == "cluster":
        return CLUSTER_KINDS + (NETNS_KINDS if netns else ())
    if deployment_kind == "external":
        return EXTERNAL_KINDS
    raise ValueError(f"unknown deployment kind {deployment_kind!r} "
                     f"(single, cluster or external)")


def check_kinds(kinds: Iterable[str], deployment_kind: str, *, netns: bool = False) -> list[str]:
    """``kinds`` sorted and deduplicated; ``UnsupportedFault`` for any the deployment
    cannot inject."""
    wanted = sorted(set(kinds))
    can = supported_kinds(deployment_kind, netns=netns)
    unknown = [k for k in wanted if k not in ALL_KINDS]
    if unknown:
        raise UnsupportedFault(f"unknown fault kind(s) {', '.join(unknown)} "
                               f"(known: {', '.join(ALL_KINDS)})")
    missing = [k for k in wanted if k not in can]
    if missing:
        why = (" (partition needs the cluster in network namespaces: run as root with `ip`)"
               if "partition" in missing and deployment_kind == "cluster" else "")
        raise UnsupportedFault(
            f"a {deployment_kind} deployment cannot inject {', '.join(missing)}{why}; "
            f"it can: {', '.join(can)}")
    return wanted


def plan(seed: int, duration_s: float, kinds: Iterable[str], deployment_kind: str,
         *, netns: bool = False) -> list[PlannedFault]:
    """The run's fault schedule; the same arguments always give the same list."""
    chosen = check_kinds(kinds, deployment_kind, netns=netns)
    if not chosen:
        return []
    rng = random.Random(f"oncelog-verify-faults-{seed}")
    last_end = duration_s - QUIET_END_S
    planned: list[PlannedFault] = []
    at = WARM_UP_S
    broker_free_at = 0.0  # when the last broker fault is healed
    while True:
        at += rng.uniform(*GAP_S)
        kind = rng.choice(chosen)
        hold = 0.0 if kind in INSTANT_KINDS else rng.uniform(*HOLD_S)
        pick = rng.randrange(1 << 31)
        if kind not in INSTANT_KINDS:
            at = max(at, broker_free_at + RECOVER_S)
        if at + hold > last_end:
            break
        fault = PlannedFault(round(at, 3), kind, round(hold, 3), pick)
        if fault.hits_broker:
            broker_free_at = fault.end_s
        planned.append(fault)
    return planned


def cut_mode(pick: int) -> str:
    return CUT_MODES[pick % len(CUT_MODES)]


def partition_mode(pick: int) -> str:
    return PARTITION_MODES[pick % len(PARTITION_MODES)]


def choose(pick: int, count: int, salt: int = 0) -> int:
    """The index (below ``count``) a pick selects; ``salt`` derives a second, independent
    choice from the same pick."""
    if count <= 0:
        raise ValueError("nothing to choose from")
    return random.Random(pick * 7919 + salt).randrange(count)
