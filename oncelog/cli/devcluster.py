"""``oncelog dev-cluster``: a local cluster to try, in the foreground: etcd (Debian's
``etcd-server``, ``make etcd``) and three ``oncelog serve`` brokers on loopback, each with
its own data directory under ``--dir``. Ctrl-C (or SIGTERM) stops the brokers (a controlled
shutdown each) and then etcd. ``make cluster`` runs it.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from oncelog.cli.common import CommandError, run_command

LOOPBACK = "127.0.0.1"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dev-cluster", help="run etcd and three brokers on loopback "
                       "(foreground; Ctrl-C stops all)")
    p.add_argument("--dir", type=Path, default=Path("cluster-data"),
                   help="where etcd's and the brokers' data go (default ./cluster-data)")
    p.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    p.add_argument("--port", type=int, default=9092,
                   help="the first broker's port; the others follow (default 9092)")
    p.add_argument("--etcd-port", type=int, default=2379, help="etcd's client port")
    p.add_argument("--etcd", default=None, help="the etcd binary (default: etcd on PATH, "
                   "else /usr/bin/etcd)")
    p.add_argument("-c", dest="configs", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting for every broker, as `oncelog serve -c` (repeatable; "
                   "e.g. -c transaction.two.phase.commit.enable=true for the Spark sink)")
    p.set_defaults(handler=cmd_dev_cluster)


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, "dev-cluster")


def _etcd_binary(given: str | None) -> str:
    found = given or shutil.which("etcd") or (
        "/usr/bin/etcd" if Path("/usr/bin/etcd").is_file() else None)
    if found is None:
        raise CommandError("no etcd binary: run `make etcd` (Debian's etcd-server)")
    return found


def _wait_for_line(path: Path, text: str, proc: subprocess.Popen[bytes], what: str,
                   timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise CommandError(f"{what} exited with {proc.returncode}; see {path}")
        time.sleep(0.1)  # polling a log file
    raise CommandError(f"{what} not ready within {timeout_s:.0f}s; see {path}")


def _start(argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def cmd_dev_cluster(args: argparse.Namespace) -> int:
    base: Path = args.dir.resolve()
    base.mkdir(parents=True, exist_ok=True)
    etcd_url = f"http://{LOOPBACK}:{args.etcd_port}"
    peer_url = f"http://{LOOPBACK}:{args.etcd_port + 1}"
    processes: list[tuple[str, subprocess.Popen[bytes]]] = []
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        etcd_log = base / "etcd.log"
        etcd = _start([
            _etcd_binary(args.etcd), "--name", "oncelog-dev", "--data-dir", str(base / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"oncelog-dev={peer_url}",
        ], etcd_log)
        processes.append(("etcd", etcd))
        _wait_for_line(etcd_log, "ready to serve client requests", etcd, "etcd")
        print(f"etcd ready on {LOOPBACK}:{args.etcd_port} (log {etcd_log})", flush=True)
        bootstrap = []
        for node_id in range(1, args.brokers + 1):
            port = args.port + node_id - 1
            log_path = base / f"broker-{node_id}.log"
            broker = _start(broker_argv(args, node_id, base), log_path)
            processes.append((f"broker {node_id}", broker))
            _wait_for_line(log_path, "oncelog ready on", broker, f"broker {node_id}")
            print(f"broker {node_id} ready on {LOOPBACK}:{port} (log {log_path})", flush=True)
            bootstrap.append(f"{LOOPBACK}:{port}")
        print(f"cluster ready: --bootstrap-server {','.join(bootstrap)}  (Ctrl-C stops it)",
              flush=True)
        while not stopping:
            for name, proc in processes:
                if proc.poll() is not None:
                    print(f"{name} exited with {proc.returncode}; stopping the cluster",
                          file=sys.stderr)
                    stopping = True
            time.sleep(0.5)  # watching the children until Ctrl-C
    finally:
        brokers, etcd_only = processes[1:], processes[:1]
        for group in (brokers, etcd_only):  # brokers first (controlled shutdown), etcd last
            for _, proc in group:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for name, proc in group:
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                print(f"{name} stopped", flush=True)
    return 0


def broker_argv(args: argparse.Namespace, node_id: int, base: Path) -> list[str]:
    """``oncelog serve`` for broker ``node_id``: its port and data directory, etcd, the
    internal topics' replication, then the user's ``-c`` settings (which win)."""
    return [
        sys.executable, "-m", "oncelog.cli.main", "serve",
        "--data-dir", str(base / f"broker-{node_id}"), "--node-id", str(node_id),
        "--listen", f"{LOOPBACK}:{args.port + node_id - 1}",
        "-c", f"metadata.etcd.endpoints={LOOPBACK}:{args.etcd_port}",
        *_internal_replication(args.brokers),
        *(flag for setting in args.configs for flag in ("-c", setting)),
    ]


def _internal_replication(brokers: int) -> list[str]:
    """Internal topics replicated over at most the brokers there are (Kafka's default 3)."""
    factor = min(3, brokers)
    return ["-c", f"offsets.topic.replication.factor={factor}",
            "-c", f"transaction.state.log.replication.factor={factor}"]
