"""Running ``oncelog.harness.TxnClient`` (kafka-clients 4.4) from the Java client tests.

Each mode reads one JSON object on stdin and prints one JSON object per line (see
TxnClient.java); ``run_txn_client`` returns those lines, ``TxnClientProcess`` runs one in the
background for tests that kill it.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import ReferenceKafkaMissing, harness_argv, require_reference, run_harness


def need_reference() -> None:
    """Fail (never skip) the test when Java or the reference cache is missing."""
    try:
        require_reference()
    except ReferenceKafkaMissing as exc:
        pytest.fail(f"reference Kafka unavailable: {exc}", pytrace=False)


TWO_PC = {"transaction.two.phase.commit.enable": "true"}
NO_TIMEOUT_MS = 2**31 - 1  # how a 2PC transaction is described (it never times out)


def two_pc_broker(tmp_path_factory: pytest.TempPathFactory, name: str
                  ) -> Iterator[BrokerProcess]:
    """The body of a module-scoped fixture: one broker that allows two-phase commit."""
    need_reference()
    broker = BrokerProcess(tmp_path_factory.mktemp(name) / "data", configs=TWO_PC)
    try:
        broker.start()
        yield broker
    finally:
        broker.kill()


def parse_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def run_txn_client(
    mode: str, bootstrap: str, spec: dict[str, Any], *, timeout: float = 120.0,
    client_config: Path | None = None,
) -> list[dict[str, Any]]:
    """Run one TxnClient mode to its end; fails the test unless it ran (exit code 0).
    ``client_config``: a properties file of client configs (security.protocol, sasl.*,
    ssl.*) for every client of the mode."""
    extra = [str(client_config)] if client_config is not None else []
    done = run_harness("TxnClient", mode, bootstrap, *extra, input=json.dumps(spec),
                       timeout=timeout)
    assert done.returncode == 0, f"TxnClient {mode} exited {done.returncode}:\n{done.stderr}"
    lines = parse_lines(done.stdout)
    assert lines and lines[-1] == {"done": True}, done.stdout + done.stderr
    return lines


def line_with(lines: list[dict[str, Any]], key: str, value: Any = None) -> dict[str, Any]:
    """The first line holding ``key`` (with ``value``, when given)."""
    for line in lines:
        if key in line and (value is None or line[key] == value):
            return line
    raise AssertionError(f"no line with {key}={value!r} in {lines}")


class TxnClientProcess:
    """A TxnClient mode running in the background, its stdin kept open (the ``prepare``
    mode waits on it), read line by line."""

    def __init__(self, mode: str, bootstrap: str, spec: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            harness_argv("TxnClient", mode, bootstrap), stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        # TxnClient reads the spec's line; ``prepare`` then waits for a second line (or EOF).
        self.lines: list[dict[str, Any]] = []

    def next_line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        text = self.proc.stdout.readline()
        if not text:
            self.proc.wait(10)
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"TxnClient ended (code {self.proc.returncode}):\n{stderr}")
        line: dict[str, Any] = json.loads(text)
        self.lines.append(line)
        return line

    def kill(self) -> int:
        """SIGKILL, as an application crash; returns the exit code (-9)."""
        self.proc.kill()
        code = self.proc.wait(10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code
