"""Fixtures for cluster tests: ``network``, a fresh ``Network`` (tests/support/netns.py).

Fails (never skips) with ``NetnsUnavailable`` when the run is not root or has no ``ip``.
Everything it made (namespaces, veth pairs, processes) is removed at teardown, whatever the
test did.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.netns import Network


@pytest.fixture
def network() -> Iterator[Network]:
    with Network() as net:
        yield net
