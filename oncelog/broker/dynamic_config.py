"""Dynamic broker configs: the settings changed at runtime with AlterConfigs /
IncrementalAlterConfigs on a broker resource, kept in ``<data-dir>/dynamic-broker-configs.json``
(written atomically, like ``topics.json``) and layered over the static settings at start.

Two layers, as in Kafka: the cluster-wide default (resource name ``""``) and this broker's
own (resource name ``"<node id>"``), which wins. Only configs whose ``dynamic`` is not
READ_ONLY may be changed, and only PER_BROKER ones need the broker's id. The listener
settings are described from how the broker was started (``--listen``, ``--advertised``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from oncelog.config import BROKER_KEYS, BrokerConfig, ConfigError, ConfigSource, Dynamic
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.files import atomic_write

log = logging.getLogger(__name__)

DYNAMIC_CONFIG_FILE = "dynamic-broker-configs.json"
_FILE_KEYS = {
    "cluster_default": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    "broker": ConfigSource.DYNAMIC_BROKER_CONFIG,
}


def describe_listeners(
    config: BrokerConfig, bound: Sequence[object], advertised: Sequence[object],
    inter_broker: str,
) -> None:
    """Record the listener settings the broker runs with: the listeners as bound (ports
    resolved), as advertised, and the inter-broker listener's name."""
    config.set_static("listeners", ",".join(str(e) for e in bound))
    config.set_static("advertised.listeners", ",".join(str(e) for e in advertised))
    config.set_static("inter.broker.listener.name", inter_broker)


def load_dynamic_configs(data_dir: Path, config: BrokerConfig) -> None:
    """Layer the stored dynamic configs over ``config`` (nothing if there are none)."""
    path = data_dir / DYNAMIC_CONFIG_FILE
    if not path.exists():
        return
    raw = json.loads(path.read_bytes())
    for file_key, level in _FILE_KEYS.items():
        values = {}
        for name, text in raw.get(file_key, {}).items():
            key = BROKER_KEYS.get(name)
            if key is None or key.dynamic is Dynamic.READ_ONLY:
                log.warning("ignoring %s=%s in %s: not a dynamic broker config", name, text, path)
                continue
            values[name] = key.parse(text)
        config.set_dynamic(level, values)
        if values:
            log.info("dynamic broker configs (%s) from %s: %s", file_key, path, values)


def save_dynamic_configs(data_dir: Path, config: BrokerConfig) -> None:
    payload = {
        file_key: {
            name: BROKER_KEYS[name].format(value) for name, value in config.dynamic(level).items()
        }
        for file_key, level in _FILE_KEYS.items()
    }
    atomic_write(data_dir / DYNAMIC_CONFIG_FILE, json.dumps(payload, indent=1).encode())


def broker_level(resource_name: str, node_id: int) -> ConfigSource:
    """The dynamic layer a broker resource names; INVALID_REQUEST (Kafka's words) for
    another broker or a name that is not an id."""
    if resource_name == "":
        return ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    try:
        requested = int(resource_name)
    except ValueError:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Broker id must be an integer, but it is: {resource_name}",
        ) from None
    if requested != node_id:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Unexpected broker id, expected {node_id}, but received {resource_name}",
        )
    return ConfigSource.DYNAMIC_BROKER_CONFIG


def validate_broker_layer(level: ConfigSource, values: Mapping[str, str | None]) -> dict[str, Any]:
    """The parsed new contents of a dynamic layer; INVALID_REQUEST with Kafka's message
    for a config that cannot change at runtime (at this level) or a bad value."""
    unknown = sorted(name for name in values if name not in BROKER_KEYS)
    if unknown:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Unknown broker configs (oncelog refuses them): [{', '.join(unknown)}]",
        )
    static = sorted(n for n in values if BROKER_KEYS[n].dynamic is Dynamic.READ_ONLY)
    if static:
        raise KafkaError(
            ErrorCode.invalid_request,
            f"Cannot update these configs dynamically: [{', '.join(static)}]",
        )
    if level is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG:
        own = sorted(n for n in values if BROKER_KEYS[n].dynamic is Dynamic.PER_BROKER)
        if own:
            raise KafkaError(
                ErrorCode.invalid_request,
                "Cannot update these configs at default cluster level, broker id must be "
                f"specified: [{', '.join(own)}]",
            )
    try:
        return {name: BROKER_KEYS[name].parse(text) for name, text in values.items()}
    except ConfigError as exc:
        raise KafkaError(ErrorCode.invalid_request, str(exc)) from None
