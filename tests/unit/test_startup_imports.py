"""What a program loads before it works: ``oncelog serve`` and the CLI's commands start
hundreds of times in the suite (and a broker at every restart), so a single node does not
load the cluster's machinery nor the client's cores, which only a cluster, the console or a
client command uses. Each check runs a fresh interpreter as ``as_program()`` prepares it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import oncelog.client
import oncelog.client.aio
from oncelog.cli.main import TOOLS, build_parser

REPO = Path(__file__).resolve().parents[2]

# What `oncelog serve` imports for a single node, up to serving (oncelog.cli.main.serve).
SERVE = (
    "import oncelog.cli.main\n"
    "import oncelog.broker.broker\n"
    "import oncelog.broker.api\n"
    "oncelog.broker.api.load_all()\n"
)

# Loaded only by a broker in cluster mode, with --ui, or by a client.
NOT_FOR_A_SINGLE_NODE = (
    "aetcd",
    "grpc",
    "aiokafka",
    "oncelog.broker.cluster.member",
    "oncelog.broker.cluster.replication",
    "oncelog.broker.cluster.controller",
    "oncelog.cluster.metadata_store",
    "oncelog.client.aio.connection",
    "oncelog.client.sasl",
    "oncelog.client.aio.admin",
    "oncelog.client.aio.consumer",
    "oncelog.client.aio.producer",
    "oncelog.client.producer",
    "oncelog.client.consumer",
    "oncelog.client.admin",
    "oncelog.ui.server",
)


def loaded_by(code: str) -> set[str]:
    """The modules a fresh program has loaded once it has run ``code``."""
    program = (
        "import sys\n"
        "from oncelog.program import as_program\n"
        "as_program()\n"
        f"{code}"
        "print('\\n'.join(sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True,
        timeout=120, check=True,
    )
    return set(result.stdout.split())


def test_serve_of_a_single_node_loads_neither_cluster_nor_client_cores() -> None:
    modules = loaded_by(SERVE)
    assert "oncelog.broker.api.produce" in modules  # the check sees what serve loads
    assert sorted(modules.intersection(NOT_FOR_A_SINGLE_NODE)) == []


# What `oncelog topics list ...` imports before it connects: main() as far as its parser
# (--help prints, here into a buffer, and exits).
TOPICS_COMMAND = (
    "import contextlib, io\n"
    "import oncelog.cli.main\n"
    "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
    "    oncelog.cli.main.main(['topics', 'list', '--help'])\n"
)


def test_a_command_loads_its_own_module_only() -> None:
    modules = loaded_by(TOPICS_COMMAND)
    assert "oncelog.cli.topics" in modules
    # Not the other commands' modules (topics reads a broker's metrics with the metrics one).
    others = {f"oncelog.cli.{name}" for name in TOOLS.values()} - {
        "oncelog.cli.topics", "oncelog.cli.metrics",
    }
    assert sorted(modules & others) == []
    # Not the consumer's codecs (the console's) nor etcd's client (the users').
    assert sorted(modules & {"aiokafka", "aetcd"}) == []


def test_tools_names_every_command_the_whole_parser_has() -> None:
    """``main`` builds one command's parser from TOOLS: a command missing there would
    still parse through the whole parser, then find no module to run it."""
    sub = next(action for action in build_parser()._actions
               if isinstance(action, argparse._SubParsersAction))
    assert set(sub.choices) == {"serve", *TOOLS}


def test_the_client_errors_alone_leave_the_client_unloaded() -> None:
    """``oncelog.client.errors`` (what every CLI command and the broker name) without the
    package's producer, consumer, admin and asyncio cores."""
    modules = loaded_by("import oncelog.client.errors\n")
    assert {name for name in modules if name.startswith("oncelog.client")} == {
        "oncelog.client", "oncelog.client.errors",
    }


@pytest.mark.parametrize("package", [oncelog.client, oncelog.client.aio],
                         ids=lambda package: package.__name__)
def test_every_public_name_of_a_lazy_package_resolves(package: ModuleType) -> None:
    for name in package.__all__:
        value = getattr(package, name)
        assert value.__name__ == name, (name, value)
        assert name in dir(package)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = package.Nope


def test_star_import_of_the_client_gives_its_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from oncelog.client import *", namespace)
    assert set(oncelog.client.__all__) <= set(namespace)
    assert namespace["Producer"] is oncelog.client.Producer
