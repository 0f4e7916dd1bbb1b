"""The verify worker's view of a Kafka client: one transactional producer and one
read_committed group consumer, behind the few calls a consume-transform-produce loop makes.

Each adapter (``oncelog_client.py``, ``confluent.py``) maps its client's errors onto
``ClientError`` with one of three kinds, as a correct exactly-once application sorts them:

- ``fatal``: the producer is fenced or unusable; the worker records what it knows and exits
  non-zero (the runner starts the slot again as a new process);
- ``abortable``: the transaction cannot commit; abort it, seek the consumer back to the
  group's committed offsets and go on;
- ``retriable``: a timeout or a lost connection; handled as abortable by the worker (the
  transaction is abandoned), the producer is recreated when ending it fails too.

Every call is bounded by a timeout: a broker that is down shows up as an error, never as a
hang.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

from oncelog.config import parse_properties

ErrorKind = Literal["fatal", "abortable", "retriable"]


class ClientError(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind: ErrorKind = kind


@dataclass(frozen=True)
class Record:
    topic: str
    partition: int
    offset: int
    value: str


@dataclass(frozen=True)
class ClientSettings:
    bootstrap: str
    group: str
    input_topic: str
    transactional_id: str
    transaction_timeout_ms: int = 10000
    call_timeout_s: float = 10.0
    # ``--command-config``: client configs by the Java client's names (security.protocol,
    # sasl.*, ssl.*), which each adapter hands its client (translated where it must be).
    configs: Mapping[str, str] = field(default_factory=dict)


def command_configs(path: Path | None) -> dict[str, str]:
    """The client configs of ``--command-config FILE`` (a properties file), none without."""
    return {} if path is None else parse_properties(path.read_text())


class Delivery(Protocol):
    def offset(self, timeout: float) -> int | None:
        """The record's offset once acknowledged; None if it failed or did not come."""
        ...


class TxnClient(Protocol):
    def init(self) -> None:
        """Create and initialise the producer (InitProducerId: fences the predecessor)."""
        ...

    def generation(self) -> int:
        """Increases on every rebalance of the consumer (a new Poll.session)."""
        ...

    def begin(self) -> None: ...

    def poll(self, max_records: int, timeout: float) -> list[Record]: ...

    def send(self, topic: str, partition: int, value: str) -> Delivery: ...

    def flush(self, timeout: float) -> None: ...

    def send_offsets(self, positions: dict[tuple[str, int], int]) -> None: ...

    def commit(self) -> None: ...

    def abort(self) -> None: ...

    def seek_to_committed(self) -> None: ...

    def close(self) -> None: ...


CLIENTS = ("oncelog", "confluent-kafka")
