"""``EtcdProcess``: a one-member etcd (Debian's ``etcd-server``, /usr/bin/etcd, installed by
``make etcd``) on loopback, the cluster tests' metadata store.

Each process has its own data directory and free client and peer ports; it is ready when
its log says "ready to serve client requests". Inside a network namespace (``host``, fixed
``port`` / ``peer_port`` and ``argv_prefix=net.exec_prefix(host)``, as the cluster fixture
does with a ``Network``) the ports are the caller's: every namespace has its own. A port
taken between picking and binding makes the start fail with "address already in use":
``start_etcd`` then tries new ports once. Tests sharing one etcd keep apart by using their
own key prefix (``unique_prefix()``).
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from oncelog.harness.net import LOOPBACK, free_port
from oncelog.harness.process import ServerProcess, ServerStartError

READY = re.compile(r"ready to serve client requests")
ETCD = "/usr/bin/etcd"


class EtcdMissing(RuntimeError):
    """No etcd binary: ``make etcd`` installs Debian's etcd-server."""


def etcd_binary() -> str:
    found = shutil.which("etcd") or (ETCD if Path(ETCD).is_file() else None)
    if found is None:
        raise EtcdMissing("no etcd binary on PATH or at /usr/bin/etcd: run `make etcd`")
    return found


class EtcdProcess(ServerProcess):
    """One etcd member, alone in its cluster, listening on ``host`` (127.0.0.1 unless
    given) only; ``argv_prefix`` goes before the etcd command (``ip netns exec NS``)."""

    name = "etcd"

    def __init__(
        self,
        base_dir: Path,
        *,
        host: str = LOOPBACK,
        port: int | None = None,
        peer_port: int | None = None,
        argv_prefix: Sequence[str] = (),
        start_timeout: float = 30.0,
    ) -> None:
        base_dir = Path(base_dir)
        super().__init__(
            log_path=base_dir / "etcd.log",
            ready_pattern=READY,
            start_timeout=start_timeout,
            stop_timeout=10.0,
        )
        self.binary = etcd_binary()
        self.data_dir = base_dir / "data"
        self.host = host
        self.port = free_port(host) if port is None else port
        self.peer_port = free_port(host) if peer_port is None else peer_port
        self.argv_prefix = list(argv_prefix)

    @property
    def endpoint(self) -> str:
        """``HOST:PORT``, as ``metadata.etcd.endpoints`` takes it."""
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        client = f"http://{self.host}:{self.port}"
        peer = f"http://{self.host}:{self.peer_port}"
        return [
            *self.argv_prefix,
            self.binary,
            "--name", "oncelog-test",
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"oncelog-test={peer}",
            "--initial-cluster-state", "new",
        ]

    def new_ports(self) -> None:
        self.port = free_port(LOOPBACK)
        self.peer_port = free_port(LOOPBACK)


def start_etcd(base_dir: Path) -> EtcdProcess:
    """A started etcd; new ports and one more try if the first ones were taken."""
    process = EtcdProcess(base_dir)
    try:
        return process.start()
    except ServerStartError as exc:
        if not exc.address_in_use:
            raise
    process.new_ports()
    return process.start()


def unique_prefix() -> str:
    """A key prefix no other test uses (tests share one etcd per module)."""
    return f"/oncelog-test-{uuid.uuid4().hex[:12]}"
