"""Test utilities: broker processes, a fault-injecting TCP proxy, naming helpers.

Tests import them as ``from tests.support.broker import BrokerProcess``; ``tests/conftest.py``
makes the repository root importable so this works under a plain ``pytest`` run.
"""

from tests.support.names import unique_topic
from tests.support.net import free_port

__all__ = ["free_port", "unique_topic"]
