"""Test utilities: peer brokers (Kafka, Tansu), naming helpers, client drivers.

Broker processes, the fault proxy, etcd, clusters and network namespaces live in
``oncelog.harness`` (``oncelog verify`` uses them too). Tests import these modules as
``from tests.support.names import unique_topic``; ``tests/conftest.py`` makes the repository
root importable so this works under a plain ``pytest`` run.
"""

from tests.support.names import unique_topic

__all__ = ["unique_topic"]
