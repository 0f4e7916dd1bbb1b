"""The console's confirmation step without a broker: a token is bound to one action and
target, used once, and expires; targets are parsed strictly; routing answers JSON errors."""

from __future__ import annotations

import asyncio
import json

import pytest

from oncelog.ui.server import TOKEN_TTL_S, Console, ConsoleError, Target


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_console() -> tuple[Console, FakeMonotonic]:
    clock = FakeMonotonic()
    return Console("127.0.0.1:1", max_timeout_ms=0, monotonic=clock), clock


def test_token_is_bound_to_its_action_and_target_and_used_once() -> None:
    console, _ = make_console()
    body = {"action": "abort", "transactional_id": "t1"}
    token = console.confirm(body)["token"]
    with pytest.raises(ConsoleError) as other:
        console._redeem({"token": token, "transactional_id": "t2"}, "abort")
    assert other.value.error == "CONFIRMATION_REQUIRED"
    token = console.confirm(body)["token"]
    assert console._redeem({"token": token, "transactional_id": "t1"}, "abort") == Target("t1")
    with pytest.raises(ConsoleError):  # a second use
        console._redeem({"token": token, "transactional_id": "t1"}, "abort")
    token = console.confirm(body)["token"]
    with pytest.raises(ConsoleError):  # another action
        console._redeem({"token": token, "transactional_id": "t1"}, "force-terminate")


def test_token_expires() -> None:
    console, clock = make_console()
    token = console.confirm({"action": "force-terminate", "transactional_id": "t"})["token"]
    clock.now += TOKEN_TTL_S + 1
    with pytest.raises(ConsoleError) as expired:
        console._redeem({"token": token, "transactional_id": "t"}, "force-terminate")
    assert expired.value.status == 403


def test_targets() -> None:
    marker = {"topic": "t", "partition": 0, "producer_id": 7, "producer_epoch": 1,
              "coordinator_epoch": -1}
    assert Target.parse(marker, "abort") == Target(marker=("t", 0, 7, 1, -1))
    assert "ABORT marker for producer 7" in Target.parse(marker, "abort").describe("abort")
    for bad, action in (({**marker, "partition": "0"}, "abort"), (marker, "force-terminate"),
                        ({"transactional_id": ""}, "abort"), ({}, "abort")):
        with pytest.raises(ConsoleError) as error:
            Target.parse(bad, action)
        assert error.value.error == "BAD_REQUEST"


def test_routing_answers_json_errors() -> None:
    console, _ = make_console()

    def call(method: str, path: str, body: bytes = b"", ctype: str = "application/json"
             ) -> tuple[int, dict[str, object]]:
        response = asyncio.run(console.handle(method, path, ctype, body))
        return response.status, json.loads(response.body)

    assert call("GET", "/api/abort")[1]["error"] == "METHOD_NOT_ALLOWED"
    assert call("POST", "/api/abort", b"not json")[1]["error"] == "BAD_REQUEST"
    assert call("POST", "/api/abort", b"[1]")[1]["error"] == "BAD_REQUEST"
    assert call("POST", "/api/abort", b'{"transactional_id": "t"}') == (
        403, {"error": "CONFIRMATION_REQUIRED",
              "message": "confirm first: POST /api/confirm gives a one-use token"})
    assert call("GET", "/secret")[0] == 404
