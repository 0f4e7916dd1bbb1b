"""``oncelog serve --event-loop``: which loop each choice gives, the environment default,
and a clear error when uvloop is demanded but missing."""

from __future__ import annotations

import builtins
import importlib
from typing import Any

import pytest

from oncelog.cli import event_loop
from oncelog.cli.event_loop import EventLoopUnavailable, loop_factory, requested


def test_command_line_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV_VARIABLE, "asyncio")
    assert requested("uvloop") == "uvloop"
    assert requested(None) == "asyncio"
    monkeypatch.delenv(event_loop.ENV_VARIABLE)
    assert requested(None) == "auto"


def test_unknown_choice_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(event_loop.ENV_VARIABLE, "trio")
    with pytest.raises(ValueError, match="unknown event loop 'trio'"):
        requested(None)


def test_asyncio_is_the_standard_loop() -> None:
    assert loop_factory("asyncio") == ("asyncio", None)


def test_auto_and_uvloop_give_uvloop() -> None:
    uvloop = importlib.import_module("uvloop")  # a dependency of oncelog

    for choice in ("auto", "uvloop"):
        name, factory = loop_factory(choice)
        assert name == "uvloop"
        assert factory is uvloop.new_event_loop


def test_without_uvloop_auto_falls_back_and_uvloop_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_uvloop(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvloop":
            raise ImportError("No module named 'uvloop'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(event_loop.importlib, "import_module",
                        lambda name: no_uvloop(name))
    assert loop_factory("auto") == ("asyncio", None)
    with pytest.raises(EventLoopUnavailable, match="uvloop is not installed"):
        loop_factory("uvloop")
