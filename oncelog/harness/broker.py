"""``BrokerProcess``: a real ``oncelog serve`` on a loopback port, for integration tests.

    broker = BrokerProcess(tmp_path / "data", configs={"num.partitions": 3}).start()
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    ...
    assert broker.stop() == 0          # SIGTERM; raises (with the log) unless exit code 0
    broker.restart(kill=True)          # crash and come back on the same port and data dir

The broker runs as ``<python> -m oncelog.cli.main serve`` with the repository root on
PYTHONPATH, so it works with or without ``pip install -e .``. Its stdout and stderr go to
``log_path`` (by default next to the data dir); readiness is the line
``oncelog ready on HOST:PORT``. The port is chosen by binding port 0 and closing it; if the
broker then reports the address in use, ``start()`` retries once on a new port.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from oncelog.harness.net import LOOPBACK, free_port
from oncelog.harness.process import ServerProcess, ServerStartError

REPO_ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"oncelog ready on (?P<host>\S+):(?P<port>\d+)")

ConfigValue = str | int | float | bool


def config_text(value: ConfigValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def default_argv_prefix() -> list[str]:
    return [sys.executable, "-m", "oncelog.cli.main"]


class BrokerProcess(ServerProcess):
    """One ``oncelog serve`` subprocess.

    ``port=None`` picks a free port (kept across restarts). ``advertised`` ("HOST:PORT") is
    what Metadata tells clients — set it to a ``FaultProxy``'s address to route clients
    through the proxy. ``configs`` become ``-c key=value`` flags. ``argv_prefix`` replaces
    ``python -m oncelog.cli.main`` (e.g. to run under a profiler; pass ``wrapped=True``
    when the prefix is a wrapper process such as ``py-spy record --``).
    """

    name = "oncelog"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        host: str = LOOPBACK,
        advertised: str | None = None,
        configs: Mapping[str, ConfigValue] | None = None,
        node_id: int | None = None,
        config_file: Path | None = None,
        log_level: str = "INFO",
        log_path: Path | None = None,
        argv_prefix: Sequence[str] | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        wrapped: bool = False,
    ) -> None:
        data_dir = Path(data_dir)
        if env is None:
            env = dict(os.environ)
            path = env.get("PYTHONPATH")
            env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
        super().__init__(
            log_path=log_path or data_dir.with_name(data_dir.name + "-oncelog.log"),
            ready_pattern=READY,
            env=env,
            cwd=REPO_ROOT,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
            wrapped=wrapped,
        )
        self.data_dir = data_dir
        self.host = host
        self._auto_port = port is None
        self.port = free_port(host) if port is None else port
        self.advertised = advertised
        self.configs: dict[str, ConfigValue] = dict(configs or {})
        self.node_id = node_id
        self.config_file = config_file
        self.log_level = log_level
        self.argv_prefix = list(argv_prefix) if argv_prefix is not None else None
        self.extra_args = list(extra_args)
        self.ready_host: str | None = None
        self.ready_port: int | None = None

    @property
    def bootstrap(self) -> str:
        """``HOST:PORT`` of the broker itself (not of a proxy in front of it)."""
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        prefix = self.argv_prefix if self.argv_prefix is not None else default_argv_prefix()
        argv = [*prefix, "serve", "--data-dir", str(self.data_dir)]
        argv += ["--listen", self.bootstrap, "--log-level", self.log_level]
        if self.advertised is not None:
            argv += ["--advertised", self.advertised]
        if self.node_id is not None:
            argv += ["--node-id", str(self.node_id)]
        if self.config_file is not None:
            argv += ["--config-file", str(self.config_file)]
        for key, value in self.configs.items():
            argv += ["-c", f"{key}={config_text(value)}"]
        return argv + self.extra_args

    def on_ready(self, match: re.Match[str]) -> None:
        self.ready_host = match.group("host")
        self.ready_port = int(match.group("port"))

    def start(self, *, wait_ready: bool = True) -> BrokerProcess:
        try:
            return super().start(wait_ready=wait_ready)
        except ServerStartError as exc:
            # The free port was taken between choosing it and the broker binding it.
            if not (exc.address_in_use and self._auto_port and self.starts == 1):
                raise
            self.port = free_port(self.host)
            return super().start()
