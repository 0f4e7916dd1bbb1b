"""``oncelog dev-cluster``: a local cluster to try, in the foreground: etcd (Debian's
``etcd-server``, ``make etcd``) and three ``oncelog serve`` brokers on loopback, each with
its own data directory and log under ``--dir``. ``make cluster`` runs it.

Each broker's command line is printed once it is ready, with its pid, so that one broker can
be stopped (``kill PID``: a controlled shutdown; ``kill -9 PID``: a crash) and started again
by hand with that command. A broker that exits does not stop the others: dev-cluster says
so and prints the command again. Started by hand within ``broker.session.timeout.ms`` of a
kill, the broker waits for its previous registration to expire, then rejoins as a follower.

Ctrl-C (or SIGTERM) stops the cluster: first it waits until etcd lists no broker that is
not running (a killed broker stays registered until its lease expires, up to
``broker.session.timeout.ms``), because a controlled shutdown moves leadership to the
registered brokers that are not shutting down, and a dead one still registered would be
chosen: stopping the survivors at once after a kill -9 left every partition led by the
dead broker with it alone in the ISR. Then it stops every running broker -- one started by
hand included, found by its data directory (Linux's /proc) -- one at a time (the
controller last), each with a controlled shutdown that moves its leaderships to the
brokers still running; the last keeps what it leads. etcd goes last.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from oncelog.cli.common import CommandError, run_command
from oncelog.cluster.metadata import MetadataImage, MetadataStoreError
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.config import BrokerConfig

LOOPBACK = "127.0.0.1"
POLL_S = 0.5  # how often the processes (and, when stopping, etcd) are looked at

RESTART_HELP = """\
To restart one broker: `kill PID` (a controlled shutdown) or `kill -9 PID` (a crash) stops
it while the others go on serving; its `broker N command:` line, run in another terminal
(output appended to its log: COMMAND >> LOG 2>&1), starts it again: it registers (after a
kill -9, once its old registration has expired: up to broker.session.timeout.ms) and
rejoins the ISRs as it catches up. Ctrl-C here stops every broker, one started by hand too,
one at a time with a controlled shutdown each, then etcd.
"""

def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dev-cluster", help="run etcd and three brokers on loopback "
                       "(foreground; Ctrl-C stops all)",
                       description="etcd and brokers on loopback, in the foreground; each "
                       "broker's pid and command line are printed when it is ready.",
                       epilog=RESTART_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
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


@dataclass
class _Broker:
    """One broker of the cluster: how to start it, and its process if dev-cluster runs it."""

    node_id: int
    argv: list[str]
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def pid(self) -> int | None:
        """The running broker's pid: dev-cluster's child, else one started by hand."""
        if self.process is not None and self.process.poll() is None:
            return self.process.pid
        return serving_pid(self.data_dir)


def serving_pid(data_dir: Path) -> int | None:
    """The process running ``oncelog serve --data-dir DATA_DIR`` (from Linux's /proc; None
    elsewhere, or if there is none). A zombie has no command line, so it does not count."""
    wanted = ["--data-dir", str(data_dir)]
    try:
        entries = [e for e in Path("/proc").iterdir() if e.name.isdigit()]
    except OSError:
        return None
    for entry in entries:
        try:
            words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "serve" in words and any(words[i:i + 2] == wanted for i in range(len(words))):
            return int(entry.name)
    return None


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
    try:
        config = cluster_config(args)
    except ValueError as exc:
        raise CommandError(f"bad configuration: {exc}", exit_code=2) from None
    brokers = [_Broker(n, broker_argv(args, n, base), base / f"broker-{n}",
                       base / f"broker-{n}.log") for n in range(1, args.brokers + 1)]
    etcd: subprocess.Popen[bytes] | None = None
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        etcd_log = base / "etcd.log"
        etcd = _start(etcd_argv(_etcd_binary(args.etcd), base, args.etcd_port), etcd_log)
        _wait_for_line(etcd_log, "ready to serve client requests", etcd, "etcd")
        print(f"etcd ready on {LOOPBACK}:{args.etcd_port} (log {etcd_log})", flush=True)
        for broker in brokers:
            broker.process = _start(broker.argv, broker.log_path)
            _wait_for_line(broker.log_path, "oncelog ready on", broker.process,
                           f"broker {broker.node_id}")
            print(f"broker {broker.node_id} ready on {LOOPBACK}:{args.port + broker.node_id - 1}"
                  f" (pid {broker.process.pid}, log {broker.log_path})\n"
                  f"broker {broker.node_id} command: {broker.command}", flush=True)
        bootstrap = ",".join(f"{LOOPBACK}:{args.port + b.node_id - 1}" for b in brokers)
        print(f"cluster ready: --bootstrap-server {bootstrap}  (Ctrl-C stops it)\n"
              f"{RESTART_HELP}", end="", flush=True)
        while not stopping:
            if etcd.poll() is not None:
                print(f"etcd exited with {etcd.returncode}; stopping the cluster",
                      file=sys.stderr, flush=True)
                return 1
            for broker in brokers:
                if broker.process is not None and broker.process.poll() is not None:
                    print(f"broker {broker.node_id} (pid {broker.process.pid}) exited with "
                          f"{broker.process.returncode}; the other brokers go on. To start "
                          f"it again: {broker.command} >> {broker.log_path} 2>&1",
                          flush=True)
                    broker.process = None
            time.sleep(POLL_S)  # watching the children until Ctrl-C
    finally:
        _stop_cluster(brokers, etcd, config)
    return 0


def _stop_cluster(brokers: list[_Broker], etcd: subprocess.Popen[bytes] | None,
                  config: BrokerConfig) -> None:
    """Every running broker, one at a time and the controller last, once no dead broker is
    registered any more (module docstring); then etcd."""
    running = {b.node_id: pid for b in brokers if (pid := b.pid()) is not None}
    controller = None
    if running and etcd is not None and etcd.poll() is None:
        image = _wait_until_only_running_registered(config, set(running))
        if image is not None and image.controller is not None:
            controller = image.controller[0]
    timeout_s = (int(config["controlled.shutdown.max.retries"])
                 * int(config["controlled.shutdown.retry.backoff.ms"]) / 1000 + 30)
    for node_id in sorted(running, key=lambda n: (n == controller, -n)):
        broker = brokers[node_id - 1]
        print(f"stopping broker {node_id} (pid {running[node_id]}): controlled shutdown",
              flush=True)
        code = _terminate(running[node_id], broker.process, broker.data_dir, timeout_s)
        print(f"broker {node_id} stopped" + ("" if code is None else f" (exit {code})"),
              flush=True)
    if etcd is not None:
        _terminate(etcd.pid, etcd, None, 30)
        print("etcd stopped", flush=True)


def _wait_until_only_running_registered(
        config: BrokerConfig, running: set[int]) -> MetadataImage | None:
    """The metadata once etcd lists only ``running`` brokers (at most the session timeout
    and a few seconds more); None if etcd cannot be read."""
    limit_s = int(config["broker.session.timeout.ms"]) / 1000 + 5

    async def wait() -> MetadataImage:
        store = EtcdMetadataStore.from_config(config)
        try:
            deadline = time.monotonic() + limit_s
            told = False
            while True:
                image = await store.load()
                dead = sorted(set(image.brokers) - running)
                if not dead:
                    return image
                if time.monotonic() > deadline:
                    print(f"broker {', '.join(map(str, dead))} still registered; stopping "
                          "the others anyway", file=sys.stderr, flush=True)
                    return image
                if not told:
                    names = ", ".join(map(str, dead))
                    print(f"waiting up to {limit_s:.0f} s for the registration of stopped "
                          f"broker {names} to expire, so that no leadership moves there",
                          flush=True)
                    told = True
                await asyncio.sleep(POLL_S)
        finally:
            await store.close()

    try:
        return asyncio.run(wait())
    except MetadataStoreError as exc:
        print(f"cannot read the cluster's metadata ({exc}); stopping the brokers anyway",
              file=sys.stderr, flush=True)
        return None


def _terminate(pid: int, process: subprocess.Popen[bytes] | None, data_dir: Path | None,
               timeout_s: float) -> int | None:
    """SIGTERM ``pid`` and wait until it exits (SIGKILL after ``timeout_s``): its exit
    status if it is dev-cluster's ``process``, else None (a broker started by hand, found
    gone once no process serves ``data_dir``)."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    if process is not None:
        try:
            return process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            return process.wait()
    deadline = time.monotonic() + timeout_s
    while data_dir is not None and serving_pid(data_dir) == pid:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            break
        time.sleep(0.1)  # polling a process that is not our child
    return None


def cluster_config(args: argparse.Namespace) -> BrokerConfig:
    """The settings every broker gets (as ``broker_argv`` passes them): what dev-cluster
    reads to reach etcd and to bound the brokers' shutdowns. ValueError if one is bad."""
    return BrokerConfig.from_sources(None, _cluster_settings(args))


def _cluster_settings(args: argparse.Namespace) -> list[str]:
    return [f"metadata.etcd.endpoints={LOOPBACK}:{args.etcd_port}",
            *_internal_replication(args.brokers), *args.configs]


def etcd_argv(binary: str, base: Path, port: int) -> list[str]:
    """A one-member etcd with its data in ``base/etcd``, clients on ``port``, peers on the
    next port."""
    client, peer = f"http://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{port + 1}"
    return [binary, "--name", "oncelog-dev", "--data-dir", str(base / "etcd"),
            "--listen-client-urls", client, "--advertise-client-urls", client,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"oncelog-dev={peer}"]


def broker_argv(args: argparse.Namespace, node_id: int, base: Path) -> list[str]:
    """``oncelog serve`` for broker ``node_id``: its port and data directory, etcd, the
    internal topics' replication, then the user's ``-c`` settings (which win)."""
    return [
        sys.executable, "-m", "oncelog.cli.main", "serve",
        "--data-dir", str(base / f"broker-{node_id}"), "--node-id", str(node_id),
        "--listen", f"{LOOPBACK}:{args.port + node_id - 1}",
        *(flag for setting in _cluster_settings(args) for flag in ("-c", setting)),
    ]


def _internal_replication(brokers: int) -> list[str]:
    """Internal topics replicated over at most the brokers there are (Kafka's default 3)."""
    factor = min(3, brokers)
    return [f"offsets.topic.replication.factor={factor}",
            f"transaction.state.log.replication.factor={factor}"]
