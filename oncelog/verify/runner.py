"""The verify runner: one run of the workload against a deployment, start to report.

``run(options, deployment, injector_factory)``:

1. the run's directory: ``history.jsonl``, ``results.json``, ``report.html``,
   ``workers/<process>.jsonl`` (each worker's own lines), ``logs/`` (every process's output);
2. ``worker setup`` creates ``<prefix>-in`` and ``<prefix>-out``;
3. ``--concurrency`` workers (clients round-robin), restarted as new process numbers when
   they exit (``pool.WorkerPool``, also the ``Workers`` the injector crashes);
4. the fault injector in a thread for ``duration``; then stop it, heal the deployment,
   SIGTERM the workers (kill -9 the stragglers);
5. ``worker final``: the final read; then every line is merged into ``history.jsonl``
   (``merge_ops``), checked (``checker.check``) and drawn (``report.write_report``).

Every process the runner starts runs with ``Deployment.client_prefix`` in front.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.verify.deployment import Deployment, FaultInjector, Workers
from oncelog.verify.history import (
    UNKNOWN,
    Fault,
    FinalRead,
    History,
    Op,
    Results,
    RunInfo,
    op_from_dict,
    parse_lines,
    write_history,
)
from oncelog.verify.pool import WorkerPool

log = logging.getLogger("oncelog.verify.runner")

# Given the workers, the run's parameters (start time, topics) and its transactional ids.
InjectorFactory = Callable[[Workers, RunInfo, list[str]], FaultInjector]
WORKER_MODULE = "oncelog.verify.worker"


class RunError(Exception):
    """The run could not go on (topics not created, a client missing...)."""


@dataclass
class VerifyOptions:
    report_dir: Path
    duration_s: float
    seed: int
    clients: list[str]
    concurrency: int = 4
    partitions: int = 4
    faults: list[str] = field(default_factory=list)
    broker_name: str = "oncelog"
    java_classpath: str | None = None
    abort_ratio: float = 0.1
    transaction_timeout_ms: int = 10000
    stop_grace_s: float = 20.0
    command_config: Path | None = None  # client configs for every worker (--command-config)
    command: str = ""  # the command line, shown by the report


# ---- merging the workers' lines (pure) ----------------------------------------------------

def merge_ops(lines: Iterable[str]) -> list[Op]:
    """Every worker's ``invoke`` and ``op`` lines → the ops, sorted by invocation, indexed.
    An invoke without its op line (the worker was killed) becomes an ``unknown`` op with no
    completion and the planned sends (offsets None)."""
    done: dict[tuple[int, int], Op] = {}
    invoked: dict[tuple[int, int], Op] = {}
    for line in lines:
        try:
            d = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line torn by kill -9
        if not isinstance(d, dict):
            continue
        kind = d.pop("type", None)
        if kind not in ("invoke", "op"):
            continue
        op = op_from_dict(d)
        (done if kind == "op" else invoked)[(op.process, op.seq)] = op
    for key, op in invoked.items():
        if key not in done:
            op.outcome = UNKNOWN
            op.complete = None
            for send in op.sends:
                send.offset = None
            op.error = op.error or "no completion: the worker ended inside the transaction"
            done[key] = op
    ops = sorted(done.values(), key=lambda o: (o.invoke, o.process, o.seq))
    for index, op in enumerate(ops):
        op.index = index
    return ops


def _lines(paths: Iterable[Path]) -> Iterable[str]:
    for path in paths:
        with open(path, errors="replace") as f:
            yield from f


# ---- the run --------------------------------------------------------------------------------

class _Run:
    def __init__(self, options: VerifyOptions, deployment: Deployment) -> None:
        self.options = options
        self.deployment = deployment
        self.dir = options.report_dir
        self.workers_dir = self.dir / "workers"
        self.logs_dir = self.dir / "logs"
        for d in (self.dir, self.workers_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        self.started_at = time.time()
        prefix = f"verify-{options.seed}-{int(self.started_at)}"
        self.info = RunInfo(
            started_at=self.started_at, seed=options.seed, duration_s=options.duration_s,
            bootstrap=deployment.bootstrap, target=deployment.kind,
            clients=list(options.clients), faults=list(options.faults),
            input_topic=f"{prefix}-in", output_topic=f"{prefix}-out",
            partitions=options.partitions, group=f"{prefix}-group",
            broker=options.broker_name, command=options.command)
        self.prefix = prefix
        self.faults: list[Fault] = []
        self._faults_lock = threading.Lock()

    def topic_args(self) -> list[str]:
        security = [] if self.options.command_config is None else [
            "--command-config", str(self.options.command_config)]
        return ["--bootstrap", self.deployment.bootstrap, "--input", self.info.input_topic,
                "--output", self.info.output_topic, "--partitions", str(self.info.partitions),
                *security]

    def python(self, command: str, *args: str) -> list[str]:
        return [*self.deployment.client_prefix, sys.executable, "-m", WORKER_MODULE, command,
                *self.topic_args(), *args]

    def call(self, name: str, argv: list[str], timeout: float) -> None:
        with open(self.logs_dir / f"{name}.log", "ab") as out:
            try:
                code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, timeout=timeout).returncode
            except subprocess.TimeoutExpired:
                raise RunError(f"{name} did not finish in {timeout:.0f}s "
                               f"(see {self.logs_dir / name}.log)") from None
        if code != 0:
            raise RunError(f"{name} failed with exit code {code} (see {self.logs_dir / name}.log)")

    def worker_argv(self, slot: int, process: int, out: Path) -> list[str]:
        client = self.options.clients[slot % len(self.options.clients)]
        flags = [*self.topic_args(), "--process", str(process), "--slot", str(slot),
                 "--seed", str(self.options.seed), "--group", self.info.group,
                 "--transactional-id", f"{self.prefix}-tx-{slot}", "--out", str(out),
                 "--started-at", repr(self.started_at),
                 "--abort-ratio", str(self.options.abort_ratio),
                 "--transaction-timeout-ms", str(self.options.transaction_timeout_ms)]
        if client == "java":
            from oncelog.verify import java_worker
            classpath = java_worker.classpath(self.options.java_classpath)
            return [*self.deployment.client_prefix, *java_worker.argv(flags, classpath)]
        return [*self.deployment.client_prefix, sys.executable, "-m", WORKER_MODULE, "work",
                "--client", client, *flags]

    def record(self, fault: Fault) -> None:
        with self._faults_lock:
            self.faults.append(fault)
        log.info("fault %s on %s at %.1fs-%s", fault.kind, fault.target, fault.start, fault.end)


def run(options: VerifyOptions, deployment: Deployment,
        injector_factory: InjectorFactory | None = None) -> Results:
    """Run the workload, check it, write the report; returns the checker's results."""
    from oncelog.verify.checker import check
    from oncelog.verify.report import write_report

    r = _Run(options, deployment)
    replication = ["--replication-factor", "3", "--min-insync-replicas", "2"] \
        if deployment.kind == "cluster" else ["--replication-factor", "1"]
    r.call("setup", r.python("setup", *replication), timeout=120)
    pool = WorkerPool(options.concurrency, r.worker_argv, r.workers_dir, r.logs_dir)
    stop = threading.Event()
    injector_thread: threading.Thread | None = None
    pool.start()
    try:
        if injector_factory is not None:
            ids = [f"{r.prefix}-tx-{slot}" for slot in range(options.concurrency)]
            injector = injector_factory(pool, r.info, ids)
            injector_thread = threading.Thread(target=injector.run, args=(stop, r.record),
                                               name="verify-injector", daemon=True)
            injector_thread.start()
        stop.wait(options.duration_s)
    finally:
        stop.set()
        if injector_thread is not None:
            injector_thread.join()
        deployment.heal()
        pool.stop(options.stop_grace_s)
    final_out = r.workers_dir / "final.jsonl"
    deadline_s = options.transaction_timeout_ms / 1000 + 60
    r.call("final", r.python("final", "--group", r.info.group, "--out", str(final_out),
                             "--started-at", repr(r.started_at),
                             "--deadline-s", str(deadline_s)), timeout=deadline_s + 60)
    final = next((x for x in parse_lines(_lines([final_out])) if isinstance(x, FinalRead)), None)
    worker_files = sorted(p for p in r.workers_dir.glob("*.jsonl") if p != final_out)
    ops = merge_ops(_lines(worker_files))
    history = History(r.info, ops, sorted(r.faults, key=lambda f: f.start), final)
    write_history(r.dir / "history.jsonl", history)
    results = check(history)
    write_report(r.dir, history, results)  # report.html and results.json
    log.info("run %s: %s, %d ops", r.prefix, "valid" if results.valid else "INVALID", len(ops))
    return results
