"""Processes, proxies and network namespaces for ``oncelog verify`` and the tests.

- ``process``: ``ServerProcess``, a server subprocess with its log, ready line, stop / kill;
- ``broker``: ``BrokerProcess``, one ``oncelog serve``;
- ``etcd``: ``EtcdProcess``, a one-member etcd (the cluster's metadata store);
- ``cluster``: ``ClusterProcess``, etcd plus N brokers, kill / pause / resume / restart;
- ``fault_proxy``: ``FaultProxy``, a Kafka-aware TCP proxy that drops responses and cuts
  connections;
- ``netns``: ``Network``, hosts in network namespaces on a bridge, cut by routes (root);
- ``net``: loopback ports; ``rawkafka``: a raw Kafka connection built on kio.

Nothing here imports pytest; the tests' fixtures (tests/conftest.py, tests/cluster/conftest.py)
build on these classes.
"""
