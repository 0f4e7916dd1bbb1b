"""KafkaJS's admin client, driven from Python through tests/js/admin_runner.js.

``make js`` (a prerequisite of ``make test``) installs KafkaJS into tests/js/node_modules
with ``npm ci`` from the committed lock file. ``run_admin(bootstrap, operations)`` runs the
operations (``{"op": <KafkaJS admin method>, "args": [...]}``) in one node process and
returns one ``{"op", "ok", "result" | "error"}`` dict per operation. Without node or the
installed modules it raises ``KafkaJSMissing`` saying how to get them: the fixture built on
it (``kafkajs_admin`` in tests/conftest.py) fails the test, never skips it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

JS_DIR = Path(__file__).resolve().parents[1] / "js"
RUNNER = JS_DIR / "admin_runner.js"
INSTALLED_STAMP = JS_DIR / "node_modules" / ".installed"

Operation = dict[str, Any]
Outcome = dict[str, Any]
KafkaJSAdmin = Callable[[str, Sequence[Operation]], list[Outcome]]
"""The ``kafkajs_admin`` fixture: ``run_admin`` once node and KafkaJS are known there."""


class KafkaJSMissing(RuntimeError):
    """node or tests/js/node_modules is missing; the message says how to get them."""


def locked_version() -> str:
    """The KafkaJS version package-lock.json pins."""
    lock = json.loads((JS_DIR / "package-lock.json").read_text())
    return str(lock["packages"]["node_modules/kafkajs"]["version"])


def installed_version() -> str | None:
    manifest = JS_DIR / "node_modules" / "kafkajs" / "package.json"
    if not manifest.is_file():
        return None
    return str(json.loads(manifest.read_text())["version"])


def node_binary() -> str:
    """``node`` on PATH and KafkaJS installed at the locked version, or ``KafkaJSMissing``."""
    node = shutil.which("node")
    if node is None:
        raise KafkaJSMissing("no node on PATH: the KafkaJS tests need Node.js 14+ and npm")
    want, have = locked_version(), installed_version()
    if have != want:
        found = "not installed" if have is None else f"{have} is installed"
        raise KafkaJSMissing(
            f"KafkaJS {want} (tests/js/package-lock.json) is needed but {found} in "
            f"{JS_DIR / 'node_modules'}: run `make js` (npm ci)"
        )
    return node


def run_admin(
    bootstrap: str, operations: Sequence[Operation], *, timeout: float = 60.0
) -> list[Outcome]:
    """Run ``operations`` with one KafkaJS admin client; one outcome per operation."""
    argv = [node_binary(), str(RUNNER), bootstrap]
    done = subprocess.run(
        argv,
        input=json.dumps(list(operations)),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=JS_DIR,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"admin_runner.js exited with {done.returncode}\nstderr:\n{done.stderr}"
        )
    outcomes: list[Outcome] = json.loads(done.stdout)
    if len(outcomes) != len(operations):
        raise RuntimeError(f"admin_runner.js answered {len(outcomes)} of {len(operations)}")
    return outcomes


def result_of(outcome: Outcome) -> Any:
    """An operation's result; AssertionError with KafkaJS's error if it failed."""
    assert outcome["ok"], f"KafkaJS {outcome['op']} failed: {outcome['error']}"
    return outcome["result"]
