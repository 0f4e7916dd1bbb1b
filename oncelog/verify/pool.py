"""The verify runner's client worker processes: one per slot, restarted as a new process
number when it exits before the run stops (slot s, incarnation k → process s*1000+k, so
values stay unique), and the ``Workers`` protocol the fault injector crashes them through.
"""

from __future__ import annotations

import json
import logging
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger("oncelog.verify.pool")

RESTART_BACKOFF_S = 1.0
MONITOR_INTERVAL_S = 0.2
CRASH_WAIT_S = 5.0
CRASH_POLL_S = 0.005

# Given (slot, process number, output file): the argv of that worker.
ArgvFor = Callable[[int, int, Path], list[str]]


def process_number(slot: int, incarnation: int) -> int:
    return slot * 1000 + incarnation


def last_line_type(path: Path) -> str | None:
    """The ``type`` of the last complete line of a worker's file (None: none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            kind = json.loads(line).get("type")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
            continue
        return str(kind) if kind is not None else None
    return None


@dataclass
class _Worker:
    slot: int
    incarnation: int
    process: int
    out: Path
    proc: subprocess.Popen[bytes]
    log: IO[bytes]
    started: float

    @property
    def name(self) -> str:
        return f"worker-{self.process}"


class WorkerPool:
    """Starts ``slots`` workers, restarts those that exit until ``stop``; ``crash_one``
    (the ``Workers`` protocol) kill -9s one, preferring one inside a transaction."""

    def __init__(self, slots: int, argv_for: ArgvFor, workers_dir: Path, logs_dir: Path) -> None:
        self.argv_for = argv_for
        self.workers_dir = workers_dir
        self.logs_dir = logs_dir
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._current: dict[int, _Worker] = {}
        self._incarnations = dict.fromkeys(range(slots), -1)
        self.started: list[int] = []  # process numbers, in start order
        self.crashed: list[int] = []
        self._monitor: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            for slot in self._incarnations:
                self._start(slot)
        self._monitor = threading.Thread(target=self._watch, name="verify-workers", daemon=True)
        self._monitor.start()

    def _start(self, slot: int) -> None:
        self._incarnations[slot] += 1
        process = process_number(slot, self._incarnations[slot])
        out = self.workers_dir / f"{process}.jsonl"
        log_file = open(self.logs_dir / f"worker-{process}.log", "ab")
        argv = self.argv_for(slot, process, out)
        proc = subprocess.Popen(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        self._current[slot] = _Worker(slot, self._incarnations[slot], process, out, proc,
                                      log_file, time.monotonic())
        self.started.append(process)
        log.info("worker slot %s started as process %s (pid %s)", slot, process, proc.pid)

    def _watch(self) -> None:
        while not self._stopping.wait(MONITOR_INTERVAL_S):
            with self._lock:
                if self._stopping.is_set():
                    return
                for slot, worker in list(self._current.items()):
                    code = worker.proc.poll()
                    if code is None:
                        continue
                    if time.monotonic() - worker.started < RESTART_BACKOFF_S:
                        continue
                    worker.log.close()
                    log.info("worker %s exited with %s; restarting slot %s", worker.name, code,
                             slot)
                    self._start(slot)

    def crash_one(self, rng: random.Random) -> str | None:
        """kill -9 a worker inside a transaction (its last line an ``invoke``), watching
        for one for up to ``CRASH_WAIT_S``; else any running worker."""
        deadline = time.monotonic() + CRASH_WAIT_S
        while True:
            with self._lock:
                running = [w for w in self._current.values() if w.proc.poll() is None]
                if not running or self._stopping.is_set():
                    return None
                inside = [w for w in running if last_line_type(w.out) == "invoke"]
                if inside or time.monotonic() > deadline:
                    victim = rng.choice(inside or running)
                    victim.proc.kill()
                    self.crashed.append(victim.process)
                    log.info("crashed %s (inside a transaction: %s)", victim.name,
                             bool(inside))
                    return victim.name
            self._stopping.wait(CRASH_POLL_S)

    def stop(self, grace_s: float) -> None:
        """SIGTERM every worker (each ends its current transaction), wait up to ``grace_s``,
        then kill -9 the rest."""
        self._stopping.set()
        if self._monitor is not None:
            self._monitor.join()
        with self._lock:
            workers = list(self._current.values())
        for w in workers:
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for w in workers:
            try:
                w.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %ss; killing it", w.name, grace_s)
                w.proc.kill()
                w.proc.wait()
            w.log.close()
