"""Starting the brokers under test on loopback: oncelog (optionally profiled), Tansu and
Apache Kafka 4.4 (the reference broker of tests/support/kafka.py, one KRaft node).

With ``profile``, py-spy attaches to the running oncelog once it is ready and is stopped
(SIGINT, which makes it write its output) before the broker is, so the profile covers the
benchmark and not the interpreter start-up. If py-spy cannot attach, the broker is started
again under ``python -m cProfile`` instead.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.broker import BrokerProcess
from tests.support.kafka import KafkaProcess
from tests.support.process import ServerProcess
from tests.support.tansu import TansuProcess

logger = logging.getLogger(__name__)

BROKERS = ("oncelog", "tansu", "kafka")
LABELS = {"oncelog": "oncelog", "tansu": "Tansu", "kafka": "Kafka"}


@dataclass
class Running:
    name: str
    server: ServerProcess
    bootstrap: str
    profile: Path | None = None
    profile_kind: str | None = None
    profiler: subprocess.Popen[bytes] | None = None
    cleanup: list[Path] = field(default_factory=list)


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _attach_py_spy(pid: int, folded: Path, log_path: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling ``pid`` into ``folded``; None if it could not attach."""
    spy = py_spy()
    if spy is None:
        return None
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "--function",
            "--nonblocking", "--rate", "100", "-o", str(folded)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            logger.warning("py-spy could not attach (exit %s); see %s", proc.returncode, log_path)
            return None
        if b"Sampling process" in log_path.read_bytes():
            return proc
        time.sleep(0.05)
    return proc


def start_oncelog(out_dir: Path, tag: str, *, profile: bool) -> Running:
    data_parent = Path(tempfile.mkdtemp(prefix="oncelog-bench-"))
    data_dir = data_parent / "data"
    log_path = out_dir / f"oncelog-{tag}.log"

    def make(argv_prefix: list[str] | None = None) -> BrokerProcess:
        return BrokerProcess(data_dir, log_level="WARNING", log_path=log_path,
                             stop_timeout=120.0, argv_prefix=argv_prefix)

    broker = make().start()
    running = Running("oncelog", broker, broker.bootstrap, cleanup=[data_parent])
    if not profile:
        return running
    folded = out_dir / f"oncelog-{tag}.folded"
    assert broker.pid is not None
    spy = _attach_py_spy(broker.pid, folded, out_dir / f"py-spy-{tag}.log")
    if spy is not None:
        running.profile, running.profile_kind, running.profiler = folded, "py-spy", spy
        return running
    broker.kill()
    shutil.rmtree(data_dir, ignore_errors=True)
    pstats_path = out_dir / f"oncelog-{tag}.pstats"
    broker = make([sys.executable, "-m", "cProfile", "-o", str(pstats_path), "-m",
                   "oncelog.cli.main"]).start()
    return Running("oncelog", broker, broker.bootstrap, pstats_path, "cprofile",
                   cleanup=[data_parent])


def start_tansu(out_dir: Path, tag: str) -> Running:
    tansu = TansuProcess(out_dir / f"tansu-{tag}.log", stop_timeout=60.0)
    tansu.start()
    return Running("tansu", tansu, tansu.bootstrap)


def start_kafka(out_dir: Path, tag: str) -> Running:
    """Kafka 4.4 with its log dirs in a temporary dir (Kafka's defaults, JVM settings of
    tests/support/kafka.py: -Xms512m -Xmx512m and kafka-run-class.sh's G1 options)."""
    data_parent = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    kafka = KafkaProcess(data_parent / "data", log_path=out_dir / f"kafka-{tag}.log",
                         stop_timeout=120.0)
    try:
        kafka.start()
    except BaseException:
        shutil.rmtree(data_parent, ignore_errors=True)
        raise
    return Running("kafka", kafka, kafka.bootstrap, cleanup=[data_parent])


def start(name: str, out_dir: Path, tag: str, *, profile: bool) -> Running:
    if name == "oncelog":
        return start_oncelog(out_dir, tag, profile=profile)
    if name == "tansu":
        return start_tansu(out_dir, tag)
    if name == "kafka":
        return start_kafka(out_dir, tag)
    raise ValueError(f"unknown broker {name!r}; known: {', '.join(BROKERS)}")


def stop(running: Running) -> int | None:
    """Stop the profiler (it writes its output), then the broker; returns the exit code."""
    if running.profiler is not None:
        with contextlib.suppress(ProcessLookupError):
            running.profiler.send_signal(signal.SIGINT)
        try:
            running.profiler.wait(60)
        except subprocess.TimeoutExpired:
            running.profiler.kill()
            running.profiler.wait()
    try:
        code: int | None = running.server.stop(check=False)
    except AssertionError as exc:
        logger.warning("%s did not stop cleanly: %s", running.name, str(exc).splitlines()[0])
        code = running.server.kill()
    for path in running.cleanup:
        shutil.rmtree(path, ignore_errors=True)
    return code
