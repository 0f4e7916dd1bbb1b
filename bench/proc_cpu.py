"""CPU time of a process, read from /proc: stable on a noisy machine, unlike wall-clock
rates. The one reader of ``/proc/PID/stat`` for the benchmarks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

__all__ = ["CpuTimes", "cpu_times"]

CLK_TCK = os.sysconf("SC_CLK_TCK")


class CpuTimes(NamedTuple):
    """Seconds of CPU so far: the process's own, and its reaped children's."""

    user: float
    system: float
    children_user: float
    children_system: float

    @property
    def own(self) -> float:
        return self.user + self.system

    @property
    def with_children(self) -> float:
        return self.user + self.system + self.children_user + self.children_system


def cpu_times(pid: int | None) -> CpuTimes | None:
    """The CPU times of ``pid``; None when it cannot be read (no pid, gone, no /proc)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the ")": state is field 3; utime, stime, cutime, cstime are fields 14-17.
    user, system, children_user, children_system = (int(v) / CLK_TCK for v in fields[11:15])
    return CpuTimes(user, system, children_user, children_system)
