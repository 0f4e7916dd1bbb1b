"""Loopback ports and addresses for test servers."""

from __future__ import annotations

import socket
import time

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port that was free a moment ago: bind port 0, read the port, close.

    Another process may take it before the caller binds it; callers that start a server on
    it retry once when the server reports the address is in use.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """True once a TCP connection to host:port succeeds, False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
