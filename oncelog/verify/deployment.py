"""The seams between the verify runner, the deployments it runs against and the fault
injector. The runner (``runner.py``) drives client workers against a ``Deployment``; a
``FaultInjector`` (``faults.py``) hits the deployment and the workers on a seeded
schedule and records each ``Fault``.

- ``--bootstrap-server``: an external deployment; ``bootstrap`` only, the user injects
  faults, ``heal`` and ``close`` do nothing.
- ``--spawn single``: one ``oncelog serve`` behind the fault proxy (cut / dropped responses).
- ``--spawn cluster``: etcd and three brokers (kills of partition leaders and coordinators,
  pauses, network partitions where network namespaces are available).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Protocol

from oncelog.verify.history import Fault


class Deployment(Protocol):
    kind: str  # "single", "cluster" or "external"
    broker: str  # "oncelog", "kafka", "tansu", ... (reported)

    @property
    def bootstrap(self) -> str:
        """What client workers connect to (through the fault proxy when there is one)."""
        ...

    @property
    def client_prefix(self) -> list[str]:
        """An argv prefix for every client process the runner starts (workers, topic
        set-up, the final read): ``[]``, or ``["ip", "netns", "exec", NS]`` when the
        brokers live in network namespaces that only a process inside can reach."""
        ...

    def heal(self) -> None:
        """End every fault: resume paused brokers, restart killed ones, heal network cuts,
        stop dropping traffic; returns when every broker serves again."""
        ...

    def close(self) -> None:
        """Stop everything this deployment started (idempotent)."""
        ...


class Workers(Protocol):
    """What the fault injector may do to the runner's client workers."""

    def crash_one(self, rng: random.Random) -> str | None:
        """kill -9 one worker, preferably inside a transaction; the runner restarts it as a
        new process. Returns the worker's name, or None when none is running."""
        ...


class FaultInjector(Protocol):
    def run(self, stop: threading.Event, record: Callable[[Fault], None]) -> None:
        """Inject the schedule's faults until ``stop`` is set (or the schedule ends), each
        recorded with ``record`` when it ends (``Fault.end`` set) or is instantaneous;
        heal whatever is still active before returning."""
        ...
