"""The README's quick start, run as written against a real ``oncelog serve``.

The README marks the code blocks a newcomer pastes with an HTML comment just before them,
``<!-- test: NAME -->``, and the output they print with ``<!-- output: NAME -->``. These tests
extract the blocks from the README itself (so the README cannot drift from what works), run
them as a newcomer would — ``sh`` blocks with bash, ``python`` blocks with the interpreter,
with the venv's ``oncelog`` on PATH and in a fresh working directory — against a broker
started here, with the README's ``localhost:9092`` replaced by the broker's address, and
compare what they print with the README's output block.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import BrokerFactory
from tests.support.broker import REPO_ROOT, BrokerProcess

README = REPO_ROOT / "README.md"
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
# The names this module runs; a marked block none of the tests below runs is an error too.
RUN = {"shell-quickstart", "client-producer", "client-consumer", "confluent",
       "2pc-prepare", "2pc-complete", "2pc-check"}  # fmt: skip


def run_block(name: str, broker: BrokerProcess, cwd: Path) -> str:
    """Run the README's ``test`` block ``name`` against ``broker``; returns its stdout."""
    block = BLOCKS["test", name]
    code = block.body.replace(README_ADDRESS, broker.bootstrap)
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    # `. .venv/bin/activate` puts the venv's scripts (`oncelog`) first on PATH.
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    if block.lang == "sh":
        argv = ["bash", "-euo", "pipefail", "-c", code]
    else:
        assert block.lang == "python", f"{name}: a {block.lang} block cannot be run"
        argv = [sys.executable, "-c", code]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)
    assert done.returncode == 0, f"README block {name} failed:\n{done.stdout}{done.stderr}"
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


def expected_output(name: str) -> str:
    return BLOCKS["output", name].body


def test_every_marked_block_is_run_and_every_output_has_its_code() -> None:
    tested = {name for kind, name in BLOCKS if kind == "test"}
    assert tested == RUN
    assert {name for kind, name in BLOCKS if kind == "output"} <= tested
    assert all(block.lang in ("sh", "python", "text") for block in BLOCKS.values())


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
