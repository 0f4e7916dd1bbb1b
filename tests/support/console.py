"""Helpers for the transactions console's tests: a broker with ``--ui``, JSON over HTTP,
and waiting on the console's state."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import free_port, wait_for_port

BrokerFactory = Callable[..., BrokerProcess]
Json = dict[str, Any]


def console_broker(broker_factory: BrokerFactory, **configs: object) -> tuple[BrokerProcess, str]:
    """A broker serving the console; its base URL."""
    port = free_port()
    broker = broker_factory(configs=configs, extra_args=["--ui", f"127.0.0.1:{port}"])
    assert wait_for_port("127.0.0.1", port, 10), "the console did not open"
    return broker, f"http://127.0.0.1:{port}"


def http(url: str, body: object = None, *, content_type: str = "application/json",
         method: str | None = None) -> tuple[int, Json]:
    """(status, parsed JSON answer) of a GET, or of a POST when ``body`` is given."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def state(base: str) -> Json:
    status, answer = http(f"{base}/api/state")
    assert status == 200, answer
    return answer


def wait_for_state(base: str, check: Callable[[Json], bool], timeout: float = 30.0) -> Json:
    """The first snapshot for which ``check`` holds (failing with the last one)."""
    deadline = time.monotonic() + timeout
    while True:
        snapshot = state(base)
        if check(snapshot):
            return snapshot
        assert time.monotonic() < deadline, f"the console never showed it: {snapshot}"
        time.sleep(0.2)  # polling interval, not synchronisation: the check decides


def partition_row(snapshot: Json, topic: str, partition: int = 0) -> Json:
    rows = [r for r in snapshot["topics"] if (r["topic"], r["partition"]) == (topic, partition)]
    assert len(rows) == 1, snapshot["topics"]
    return rows[0]


def confirmed(base: str, action: str, target: Json) -> Json:
    """Confirm ``action`` on ``target`` and perform it; its answer."""
    status, token = http(f"{base}/api/confirm", {"action": action, **target})
    assert status == 200, token
    status, answer = http(f"{base}/api/{action}", {"token": token["token"], **target})
    assert status == 200, answer
    return answer
