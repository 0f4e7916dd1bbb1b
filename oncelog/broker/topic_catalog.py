"""The topic catalog: which topics exist, with their ids, partition counts and config
overrides, kept in ``topics.json`` in the data directory (written through
oncelog.storage.files.atomic_write), Kafka's topic name rules, and the catalog rebuilt from
the partition directories when it is missing or lacks a topic (the directories are the truth
about what data exists).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.broker.datadir import DataDirError
from oncelog.broker.log_dirs import partition_dirs
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import INTERNAL_TOPICS
from oncelog.storage.files import atomic_write

log = logging.getLogger(__name__)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
CATALOG_FILE = "topics.json"


def read_catalog(path: Path) -> dict[str, TopicInfo]:
    """The topics of ``topics.json``; DataDirError, saying how to recover, if unreadable."""
    try:
        raw = json.loads(path.read_bytes())
        topics: dict[str, TopicInfo] = {}
        for entry in raw["topics"]:
            info = TopicInfo(
                name=str(entry["name"]),
                topic_id=uuid.UUID(entry["topic_id"]),
                partitions=int(entry["partitions"]),
                configs={str(k): str(v) for k, v in entry.get("configs", {}).items()},
            )
            topics[info.name] = info
        return topics
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataDirError(
            f"{path} is damaged ({type(exc).__name__}: {exc}); to recover, move it aside "
            f"(mv {path} {path}.damaged) and start again: the topic list is then rebuilt "
            "from the partition directories, with new topic ids and broker-default topic "
            "configs (set any per-topic configs again afterwards)"
        ) from None


def validate_topic_name(name: str) -> None:
    """Kafka's topic name rules; INVALID_TOPIC_EXCEPTION when broken."""
    if not name or name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"illegal topic name {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name longer than 249")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} has characters other than ASCII alphanumerics, '.', '_', '-'",
        )


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    # Replicas per partition (CreateTopics' answer); always 1 on a single node, where it is
    # not kept in the catalog.
    replication_factor: int = 1

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS



def write_catalog(path: Path, topics: Mapping[str, TopicInfo]) -> None:
    """Write ``topics`` to the catalog file ``path``, atomically."""
    payload = {
        "topics": [
            {
                "name": t.name,
                "topic_id": str(t.topic_id),
                "partitions": t.partitions,
                "configs": t.configs,
            }
            for t in topics.values()
        ]
    }
    atomic_write(path, json.dumps(payload, indent=1).encode())


def adopt_partition_dirs(
    topics: dict[str, TopicInfo],
    log_dirs: list[Path],
    internal_configs: Mapping[str, Mapping[str, str]],
) -> bool:
    """Add to ``topics`` what the partition directories show it lacks; True if any."""
    changed = False
    for topic, count in sorted(partition_dirs(log_dirs).items()):
        info = topics.get(topic)
        if info is None:
            configs = dict(internal_configs.get(topic, {}))
            info = TopicInfo(topic, uuid.uuid4(), count, configs)
            topics[topic] = info
            log.warning(
                "topic %s was not in %s: rebuilt from its partition directories with %d "
                "partitions, new topic id %s, configs %s (per-topic configs cannot be "
                "rebuilt from the data: any it had are lost)",
                topic, CATALOG_FILE, count, info.topic_id, configs or "broker defaults",
            )
            changed = True
        elif count > info.partitions:
            log.warning(
                "topic %s has partition directories up to %d but %s lists %d partitions: "
                "keeping all %d", topic, count - 1, CATALOG_FILE, info.partitions, count,
            )
            info.partitions = count
            changed = True
    return changed
