"""The broker config registry against the source, read with ``ast``: every key that code
reads (``config["..."]``, ``config.get("...")``) is in ``BROKER_KEYS``, and every key the
registry accepts is read somewhere (a key that is accepted but does nothing misleads the
operator who sets it: it must be wired or refused)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import oncelog
from oncelog.config import BROKER_KEYS, TOPIC_CONFIGS

ROOT = Path(oncelog.__file__).parent
# The client and the Spark connector have their own registries (librdkafka's names).
OWN_REGISTRY = ("client", "spark")
DOTTED = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)+$")
CONFIG_NAME = re.compile(r"^[a-z0-9]+(\.[a-z0-9]+)*$")  # also one-word names (listeners)


def broker_side_modules() -> list[tuple[Path, ast.Module]]:
    return [
        (path, ast.parse(path.read_text(), str(path)))
        for path in sorted(ROOT.rglob("*.py"))
        if path.relative_to(ROOT).parts[0] not in OWN_REGISTRY
    ]


def _reads_config(node: ast.expr) -> bool:
    """Is ``node`` a broker config object: ``config``, ``self.config``, ``self._config``, or
    ``self`` inside ``BrokerConfig``?"""
    text = ast.unparse(node)
    return text.rsplit(".", 1)[-1].lstrip("_") == "config"


def config_reads() -> set[str]:
    """Keys read with ``<config>["key"]`` or ``<config>.get("key")``."""
    found: set[str] = set()
    for _, tree in broker_side_modules():
        in_broker_config = [
            n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "BrokerConfig"
        ]
        self_nodes = {id(n) for c in in_broker_config for n in ast.walk(c)}
        for node in ast.walk(tree):
            key: ast.expr | None = None
            target: ast.expr | None = None
            if isinstance(node, ast.Subscript):
                key, target = node.slice, node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                  and node.func.attr == "get" and node.args):
                key, target = node.args[0], node.func.value
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)
                    and DOTTED.match(key.value) and target is not None):
                continue
            is_self = (isinstance(target, ast.Name) and target.id == "self"
                       and id(node) in self_nodes)
            if _reads_config(target) or is_self:
                found.add(key.value)
    return found


def names_mentioned_outside_the_registry() -> set[str]:
    """Every dotted string constant in the broker-side code, except the registry's own
    definitions (a key named in a loop or a mapping, e.g. a topic config's synonyms, is
    read there)."""
    mentioned: set[str] = set()
    for _, tree in broker_side_modules():
        skip: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.AnnAssign | ast.Assign):
                targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
                if any(isinstance(t, ast.Name) and t.id in ("BROKER_KEYS", "_BROKER_KEYS")
                       for t in targets):
                    skip |= {id(n) for n in ast.walk(node)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and CONFIG_NAME.match(node.value) and id(node) not in skip):
                mentioned.add(node.value)
    return mentioned


def test_every_key_read_is_registered() -> None:
    assert sorted(config_reads() - set(BROKER_KEYS)) == []


def test_every_registered_key_is_read() -> None:
    # A topic config's broker synonyms are read when a topic's default is resolved.
    synonyms = {name for key in TOPIC_CONFIGS.values() for name in key.synonyms}
    read = names_mentioned_outside_the_registry() | synonyms
    assert sorted(set(BROKER_KEYS) - read) == []


def test_the_scan_sees_reads() -> None:
    reads = config_reads()
    assert {"max.connections", "num.partitions", "transaction.max.timeout.ms"} <= reads
