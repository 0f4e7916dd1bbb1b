"""The README's quick start and the dual-write example's crash drill, run as written.

README.md and examples/dual_write/README.md mark the code blocks a reader pastes with an HTML
comment just before them, ``<!-- test: NAME -->``, and the output they print with
``<!-- output: NAME -->``. These tests extract the blocks from the files themselves (so the
documentation cannot drift from what works), run them as a newcomer would — ``sh`` blocks
with bash as if pasted into a shell, ``python`` blocks with the interpreter, with the venv's
``oncelog`` on PATH — against a broker started here, with ``localhost:9092`` replaced by the
broker's address, and compare what they print with the output block. A line that starts a
broker (``oncelog serve ... &``) is left out: the broker started here stands in for it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.conftest import BrokerFactory

README = REPO_ROOT / "README.md"
DUAL_WRITE_README = REPO_ROOT / "examples" / "dual_write" / "README.md"
README_ADDRESS = "localhost:9092"
MARKED_BLOCK = re.compile(
    r"<!-- (?P<kind>test|output): (?P<name>[\w-]+) -->\n```(?P<lang>\w+)\n(?P<body>.*?)^```",
    re.DOTALL | re.MULTILINE,
)
TWO_PHASE = {"transaction.two.phase.commit.enable": True}


@dataclass(frozen=True)
class Block:
    kind: str  # "test" (code to run) or "output" (what it prints)
    name: str
    lang: str
    body: str


def readme_blocks(text: str) -> dict[tuple[str, str], Block]:
    """Every marked block of ``text`` by (kind, name); a name marked twice is an error."""
    blocks: dict[tuple[str, str], Block] = {}
    for match in MARKED_BLOCK.finditer(text):
        block = Block(match["kind"], match["name"], match["lang"], match["body"])
        assert (block.kind, block.name) not in blocks, f"{block.kind} {block.name} twice"
        blocks[block.kind, block.name] = block
    return blocks


BLOCKS = readme_blocks(README.read_text())
DRILL = readme_blocks(DUAL_WRITE_README.read_text())
# The names this module runs; a marked block none of the tests below runs is an error too.
RUN = {
    README: {"shell-quickstart", "client-producer", "client-consumer", "confluent",
             "2pc-prepare", "2pc-complete", "2pc-check"},
    DUAL_WRITE_README: {"dualwrite-run", "dualwrite-crash", "dualwrite-recover"},
}  # fmt: skip


def run_block(
    name: str,
    broker: BrokerProcess,
    cwd: Path,
    blocks: dict[tuple[str, str], Block] = BLOCKS,
    replace: dict[str, str] | None = None,
) -> str:
    """Run the ``test`` block ``name`` against ``broker`` as if pasted into an interactive
    shell (no ``set -e``) or run as a Python script; returns its stdout."""
    block = blocks["test", name]
    code = block.body.replace(README_ADDRESS, broker.bootstrap)
    for old, new in (replace or {}).items():
        code = code.replace(old, new)
    code = "\n".join(line for line in code.splitlines() if not line.startswith("oncelog serve"))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    # `. .venv/bin/activate` puts the venv's scripts (`oncelog`) first on PATH.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if block.lang == "sh":
        argv = ["bash", "-c", code]
    else:
        assert block.lang == "python", f"{name}: a {block.lang} block cannot be run"
        argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert done.returncode == 0, f"README block {name} failed:\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def expected_output(name: str, blocks: dict[tuple[str, str], Block] = BLOCKS) -> str:
    return blocks["output", name].body


@pytest.mark.parametrize("path", [README, DUAL_WRITE_README], ids=lambda p: p.name)
def test_every_marked_block_is_run_and_every_output_has_its_code(path: Path) -> None:
    blocks = readme_blocks(path.read_text())
    tested = {name for kind, name in blocks if kind == "test"}
    assert tested == RUN[path]
    assert {name for kind, name in blocks if kind == "output"} <= tested
    assert all(block.lang in ("sh", "python", "text") for block in blocks.values())


def test_shell_quickstart(broker: BrokerProcess, tmp_path: Path) -> None:
    assert run_block("shell-quickstart", broker, tmp_path) == expected_output("shell-quickstart")


def test_client_transaction_then_read_committed_consumer(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    assert run_block("client-producer", broker, tmp_path) == ""
    out = run_block("client-consumer", broker, tmp_path)
    assert out == expected_output("client-consumer")
    assert "melons" not in out  # the aborted transaction's record


def test_confluent_kafka_does_the_same(broker: BrokerProcess, tmp_path: Path) -> None:
    out = run_block("confluent", broker, tmp_path)
    assert out == expected_output("confluent")
    # And oncelog.client's consumer reads what confluent-kafka wrote, in the same way.
    assert run_block("client-consumer", broker, tmp_path) == expected_output("client-consumer")


def test_two_phase_commit_prepare_store_complete(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    broker = broker_factory(configs=TWO_PHASE)
    assert run_block("2pc-prepare", broker, tmp_path) == ""
    assert (tmp_path / "ledger.db").exists()
    # Prepared, stored in the database, not yet completed: read_committed sees nothing.
    assert run_block("2pc-check", broker, tmp_path) == ""
    assert run_block("2pc-complete", broker, tmp_path) == ""
    assert run_block("2pc-check", broker, tmp_path) == expected_output("2pc-check")


def test_dual_write_crash_drill_as_written(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    """examples/dual_write/README.md: a first run, the crash between the database commit and
    the log commit (the table and the topic disagree, the transaction stays open), the rerun
    that commits the log side (they agree). Run from the repository root, as it says."""
    broker = broker_factory(configs=TWO_PHASE)
    db = {"/tmp/orders.db": str(tmp_path / "orders.db")}

    def run(name: str) -> str:
        return run_block(name, broker, REPO_ROOT, DRILL, db)

    assert run("dualwrite-run").splitlines()[-1] == "done orders=100 placed_now=100"
    assert run("dualwrite-crash") == expected_output("dualwrite-crash", DRILL)
    assert run("dualwrite-recover") == expected_output("dualwrite-recover", DRILL)
