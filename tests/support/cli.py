"""Run the ``oncelog`` command as a user does (``python -m oncelog`` from the repository
root, a subprocess) and check what it printed: no traceback, ever."""

from __future__ import annotations

import subprocess
import sys

from oncelog.harness.broker import REPO_ROOT


def oncelog_cli(*args: str, stdin: str = "", timeout: float = 60,
                module: str = "oncelog") -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO_ROOT, input=stdin,
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that must have succeeded."""
    assert result.returncode == 0, (result.stdout, result.stderr)
    return result.stdout
