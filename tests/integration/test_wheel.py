"""The package as a user gets it: a wheel built from the repository installs into a clean
virtual environment (its dependencies from the package index, through pip's cache) and runs
``oncelog --version`` and ``oncelog serve`` up to its ready line."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import oncelog
from oncelog.harness.broker import REPO_ROOT
from oncelog.harness.net import free_port

pytestmark = pytest.mark.wheel


def run(*argv: str | Path, timeout: float = 600) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                            timeout=timeout, check=False)
    assert result.returncode == 0, (argv, result.stdout[-3000:], result.stderr[-3000:])
    return result.stdout


@pytest.mark.timeout(900)
def test_wheel_installs_in_a_clean_venv_and_serves(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: the build leaves nothing in the repository
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO_ROOT / name, source / name)
    shutil.copytree(REPO_ROOT / "oncelog", source / "oncelog",
                    ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", dist, source)
    wheels = list(dist.glob("oncelog-*.whl"))
    assert len(wheels) == 1, wheels
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(python, "-m", "pip", "install", "--quiet", wheels[0])

    # The installed package, not the repository: run from elsewhere, no PYTHONPATH.
    version = run(venv / "bin" / "oncelog", "--version")
    assert version.strip().startswith("oncelog ")
    assert version.strip() != "oncelog 0+unknown"
    files = run(python, "-c", "import oncelog, pathlib; p = pathlib.Path(oncelog.__file__)"
                ".parent; print((p / 'py.typed').is_file(), oncelog.__version__)")
    assert files.split()[0] == "True"
    assert files.split()[1] == oncelog.__version__
    metadata = run(python, "-c", "from importlib.metadata import metadata; "
                   "m = metadata('oncelog'); print(m['License-Expression'])")
    assert metadata.strip() == "Apache-2.0"

    port = free_port()
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(
            [venv / "bin" / "oncelog", "serve", "--data-dir", tmp_path / "data",
             "--listen", f"127.0.0.1:{port}"],
            cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"},
        )
    try:
        deadline = time.monotonic() + 120
        while f"oncelog ready on 127.0.0.1:{port}" not in log.read_text():
            assert serve.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)  # polling a file the server writes; no event to wait on
    finally:
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(60) == 0, log.read_text()
