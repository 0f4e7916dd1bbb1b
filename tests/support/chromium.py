"""Headless Debian chromium driven over the Chrome DevTools Protocol (a websocket to the
page target): navigate, evaluate JavaScript in the page, wait on page state, screenshot.
``make browser`` installs chromium; its absence fails a test rather than skipping it."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import websocket

from oncelog.harness.net import free_port, wait_for_port

CHROMIUM = "/usr/bin/chromium"
# Flags that keep headless chromium to itself (no first-run, sync, update or QUIC traffic).
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", "--window-size=1280,1000",
)


class Page:
    """One page target: ``evaluate`` runs an expression (awaiting promises) and returns its
    JSON value; ``wait_for`` polls an expression until it is truthy in JavaScript."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self._ws = ws
        self._next_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._next_id += 1
        call_id = self._next_id
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._ws.recv())
            if message.get("id") != call_id:
                continue  # an event
            if "error" in message:
                raise AssertionError(f"{method} failed: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.evaluate(f"!!({expression})") is True:  # an element would come back {}
                return
            if time.monotonic() > deadline:
                text = self.evaluate("document.body.innerText")
                raise AssertionError(f"the page never satisfied {expression!r}; it shows:\n{text}")
            time.sleep(0.1)  # polling interval; the expression decides

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])


@contextmanager
def chromium_page(url: str) -> Iterator[Page]:
    """Headless chromium showing ``url``; its page over the DevTools protocol."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail(f"{CHROMIUM} is missing: run `make browser` (Debian's chromium package)",
                    pytrace=False)
    port = free_port()
    profile = tempfile.mkdtemp(prefix="oncelog-chromium-")
    process = subprocess.Popen(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", f"--remote-debugging-port={port}",
         url],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        assert wait_for_port("127.0.0.1", port, 30), "chromium's DevTools port did not open"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.loads(r.read())
        [target] = [t for t in targets if t["type"] == "page"]
        ws = websocket.create_connection(target["webSocketDebuggerUrl"], timeout=30,
                                         suppress_origin=True)
        try:
            yield Page(ws)
        finally:
            ws.close()
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        shutil.rmtree(profile, ignore_errors=True)
