"""A server subprocess with its output in a log file, started and stopped deterministically.

``ServerProcess`` is the common part of ``BrokerProcess`` (oncelog) and ``TansuProcess``
(the peer broker): it starts the command with stdout and stderr appended to one log file,
waits until a line of that log matches the server's "ready" pattern (or the process exits,
or a timeout passes — then ``ServerStartError`` carries the log), and stops it with SIGTERM
(checking the exit code) or SIGKILL. Every process still alive when the interpreter exits is
killed, so an aborted test run leaves no broker behind.

A wrapped server (``wrapped=True``: the command is e.g. ``py-spy record -- python ...``) is
signalled through the wrapper's child, so the wrapper sees its child exit and finishes its
own work (writing the profile) before exiting with the child's status.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import signal
import subprocess
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Self

logger = logging.getLogger(__name__)

_LIVE: weakref.WeakSet[ServerProcess] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:
    for server in list(_LIVE):
        server.kill()


class ServerStartError(RuntimeError):
    """The server did not become ready; the message includes its log."""

    def __init__(self, message: str, *, log: str, address_in_use: bool) -> None:
        super().__init__(f"{message}\n----- server log -----\n{log}\n----- end of log -----")
        self.log = log
        self.address_in_use = address_in_use


class ServerStopError(AssertionError):
    """The server did not exit cleanly when asked to; the message includes its log."""


_ADDRESS_IN_USE = re.compile(r"address already in use|errno 98|addrinuse", re.IGNORECASE)


class ServerProcess:
    """One server subprocess. Subclasses supply ``argv()`` and the ready pattern."""

    name = "server"

    def __init__(
        self,
        *,
        log_path: Path,
        ready_pattern: re.Pattern[str],
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        start_timeout: float = 30.0,
        stop_timeout: float = 30.0,
        wrapped: bool = False,
    ) -> None:
        self.log_path = Path(log_path)
        self.ready_pattern = ready_pattern
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.wrapped = wrapped
        self.ready_line: str | None = None
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_offset = 0

    # -- to be provided by subclasses ----------------------------------------------------
    def argv(self) -> list[str]:
        raise NotImplementedError

    def on_ready(self, match: re.Match[str]) -> None:
        """Called with the ready line's match once the server is ready."""

    # -- lifecycle -----------------------------------------------------------------------
    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, *, wait_ready: bool = True) -> Self:
        """Start the process and block until it is ready (``wait_ready``, the default);
        ``ServerStartError`` otherwise."""
        if self.is_running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        argv = self.argv()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        with open(self.log_path, "ab") as log:
            header = f"===== start #{self.starts}: {' '.join(argv)}\n"
            log.write(header.encode())
            log.flush()
            self._log_offset = log.tell()
            env = dict(os.environ if self.env is None else self.env)
            env.setdefault("PYTHONUNBUFFERED", "1")
            self._proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
            )
        _LIVE.add(self)
        logger.info("started %s pid=%d: %s", self.name, self._proc.pid, " ".join(argv))
        if wait_ready:
            self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            match = self._find_ready_line()
            if match is not None:
                self.ready_line = match.group(0)
                self.on_ready(match)
                return
            code = self._proc.poll()
            if code is not None:
                log = self.log_text(since_start=True)
                raise ServerStartError(
                    f"{self.name} exited with code {code} before it was ready",
                    log=log,
                    address_in_use=bool(_ADDRESS_IN_USE.search(log)),
                )
            if time.monotonic() >= deadline:
                self.kill()
                raise ServerStartError(
                    f"{self.name} was not ready after {self.start_timeout:.0f}s "
                    f"(waiting for a line matching {self.ready_pattern.pattern!r})",
                    log=self.log_text(since_start=True),
                    address_in_use=False,
                )
            time.sleep(0.01)

    def _find_ready_line(self) -> re.Match[str] | None:
        for line in self.log_text(since_start=True).splitlines():
            match = self.ready_pattern.search(line)
            if match is not None:
                return match
        return None

    def _signal(self, sig: signal.Signals) -> None:
        assert self._proc is not None
        targets = [self._proc.pid]
        if self.wrapped:
            targets = _children(self._proc.pid) or targets
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self, *, timeout: float | None = None, check: bool = True) -> int:
        """SIGTERM, wait for exit and return the exit code.

        With ``check`` (the default) anything but exit code 0 — or not exiting within the
        timeout, after which the process is killed — raises ``ServerStopError`` with the log.
        """
        if self._proc is None:
            raise RuntimeError(f"{self.name} was never started")
        if self._proc.poll() is None:
            self._signal(signal.SIGTERM)
        wait = self.stop_timeout if timeout is None else timeout
        try:
            code = self._proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.kill()
            raise ServerStopError(
                f"{self.name} pid {self._proc.pid} did not exit within {wait:.0f}s of SIGTERM; "
                f"killed\n{self.log_text(since_start=True)}"
            ) from None
        finally:
            _LIVE.discard(self)
        logger.info("%s pid=%d exited with %d", self.name, self._proc.pid, code)
        if check and code != 0:
            raise ServerStopError(
                f"{self.name} exited with code {code} after SIGTERM (expected 0)\n"
                f"{self.log_text(since_start=True)}"
            )
        return code

    def kill(self) -> int | None:
        """SIGKILL (a crash) and reap; returns the exit code, None if never started."""
        if self._proc is None:
            return None
        if self._proc.poll() is None:
            if self.wrapped:
                # Kill the real server first so a wrapper cannot outlive it as an orphan.
                self._signal(signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
        code = self._proc.wait()
        _LIVE.discard(self)
        return code

    def restart(self, *, kill: bool = False) -> Self:
        """Stop (cleanly, or with SIGKILL when ``kill``) and start again with the same argv."""
        if self.is_running:
            if kill:
                self.kill()
            else:
                self.stop()
        return self.start()

    # -- log -----------------------------------------------------------------------------
    def log_text(self, *, since_start: bool = False) -> str:
        """The log file's text: all starts, or only the current one."""
        try:
            with open(self.log_path, "rb") as log:
                if since_start:
                    log.seek(self._log_offset)
                return log.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 200) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> Self:
        return self if self.is_running else self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def __repr__(self) -> str:
        state = "running" if self.is_running else f"exited {self.returncode}"
        return f"<{type(self).__name__} {self.name} pid={self.pid} {state} log={self.log_path}>"


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    found: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    with contextlib.suppress(OSError):
        for task in task_dir.iterdir():
            with contextlib.suppress(OSError):
                found.extend(int(p) for p in (task / "children").read_text().split())
    return found
