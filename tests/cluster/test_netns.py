"""The network-namespace helper (oncelog/harness/netns.py): reachability, cuts, heal,
isolate, teardown, two networks side by side, stale clean-up, processes inside a host.

Echo servers run inside hosts (``Network.run``); the test probes from other hosts with
sockets created in their namespaces (``Network.socket``). No sleeps: connections that must
work are retried until a deadline, those that must not are expected to fail at once.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from oncelog.cluster.metadata import MetadataImage
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.harness import netns
from oncelog.harness.broker import REPO_ROOT
from oncelog.harness.etcd import EtcdProcess, unique_prefix
from oncelog.harness.netns import NETNS_DIR, NetnsUnavailable, Network

ECHO_PORT = 7007
# A line echo server: the first argument is the address to listen on.
ECHO_SERVER = """
import socketserver, sys
class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(line)
socketserver.ThreadingTCPServer.allow_reuse_address = True
socketserver.ThreadingTCPServer((sys.argv[1], int(sys.argv[2])), Echo).serve_forever()
"""
FAIL_FAST = 0.5  # seconds: a cut connection attempt must fail well within this


def start_echo(net: Network, host: str) -> subprocess.Popen[bytes]:
    return net.run(host, [sys.executable, "-c", ECHO_SERVER, net.address(host), str(ECHO_PORT)],
                   stdin=subprocess.DEVNULL)


def echo_once(net: Network, source: str, target: str, *, timeout: float = 2.0) -> bytes:
    """Connect from ``source`` to ``target``'s echo server, send a line, return the reply."""
    with net.socket(source) as sock:
        sock.settimeout(timeout)
        sock.connect((net.address(target), ECHO_PORT))
        sock.sendall(b"ping from " + source.encode() + b"\n")
        return sock.recv(100)


def wait_echo(net: Network, source: str, target: str, deadline_s: float = 10.0) -> bytes:
    """``echo_once`` retried (the server may still be starting) until a deadline."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return echo_once(net, source, target)
        except ConnectionRefusedError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)  # polling a condition with a deadline, not synchronisation


def connect_error(net: Network, source: str, target: str) -> tuple[OSError | None, float]:
    """The error (None if it connected) of one attempt from ``source`` to ``target``."""
    started = time.monotonic()
    with net.socket(source) as sock:
        sock.settimeout(FAIL_FAST * 4)
        try:
            sock.connect((net.address(target), ECHO_PORT))
        except OSError as exc:
            return exc, time.monotonic() - started
    return None, time.monotonic() - started


def assert_cut(net: Network, source: str, target: str) -> None:
    error, elapsed = connect_error(net, source, target)
    assert error is not None, f"{source} still reaches {target}"
    assert error.errno == errno.EHOSTUNREACH, error
    assert elapsed < FAIL_FAST, f"{source} -> {target} took {elapsed:.2f}s to fail"


def root_links() -> list[str]:
    return sorted(line.split(":")[1].strip() for line in netns.ip("-o", "link").splitlines())


def test_echo_server_in_one_host_is_reached_from_another(network: Network) -> None:
    network.add_host("a")
    network.add_host("b")
    assert network.address("a") != network.address("b")
    start_echo(network, "a")
    assert wait_echo(network, "b", "a") == b"ping from b\n"


def test_cut_fails_fast_both_ways_a_third_host_reaches_both_and_heal_restores(
    network: Network,
) -> None:
    for host in ("a", "b", "c"):
        network.add_host(host)
        start_echo(network, host)
    wait_echo(network, "c", "a")
    wait_echo(network, "c", "b")
    wait_echo(network, "a", "c")
    established = network.socket("b")
    established.settimeout(2.0)
    established.connect((network.address("a"), ECHO_PORT))

    network.cut("a", "b")

    assert_cut(network, "a", "b")
    assert_cut(network, "b", "a")
    assert echo_once(network, "c", "a") == b"ping from c\n"
    assert echo_once(network, "c", "b") == b"ping from c\n"
    assert echo_once(network, "a", "c") == b"ping from a\n"
    # An established connection carries nothing any more: b's packets are dropped as they
    # leave (the send may fail at once or be left to retransmit; either way no echo).
    established.settimeout(FAIL_FAST)
    with established, pytest.raises(OSError):
        established.sendall(b"lost\n")
        established.recv(100)

    network.heal("a", "b")

    assert network.cuts == set()
    assert echo_once(network, "a", "b") == b"ping from a\n"
    assert echo_once(network, "b", "a") == b"ping from b\n"


def test_isolate_keeps_the_kept_host_and_heal_all_restores(network: Network) -> None:
    hosts = ("etcd", "b1", "b2", "b3")
    for host in hosts:
        network.add_host(host)
        start_echo(network, host)
    for host in hosts[1:]:
        wait_echo(network, "etcd", host)
    wait_echo(network, "b2", "etcd")

    network.isolate("b1", keep=("etcd",))

    assert echo_once(network, "b1", "etcd") == b"ping from b1\n"
    assert echo_once(network, "etcd", "b1") == b"ping from etcd\n"
    for other in ("b2", "b3"):
        assert_cut(network, "b1", other)
        assert_cut(network, other, "b1")
    assert echo_once(network, "b2", "b3") == b"ping from b2\n"

    network.heal_all()

    for other in ("b2", "b3"):
        assert echo_once(network, "b1", other) == b"ping from b1\n"


def test_teardown_leaves_no_namespace_link_or_process() -> None:
    links_before = root_links()
    with Network() as net:
        for host in ("a", "b"):
            net.add_host(host)
        server = start_echo(net, "a")
        wait_echo(net, "b", "a")
        made = [name for name in netns.namespaces() if name.startswith(net.hub)]
        assert len(made) == 3  # the hub and two hosts
        net.cut("a", "b")
    assert [name for name in netns.namespaces() if name.startswith(net.hub)] == []
    assert root_links() == links_before
    assert server.poll() is not None


def test_teardown_after_a_failing_test_body_still_removes_everything() -> None:
    with pytest.raises(ZeroDivisionError), Network() as net:
        net.add_host("a")
        server = start_echo(net, "a")
        _ = 1 / 0
    assert [name for name in netns.namespaces() if name.startswith(net.hub)] == []
    assert server.poll() is not None


def test_two_networks_at_once_do_not_collide() -> None:
    with Network() as one, Network() as two:
        for net in (one, two):
            net.add_host("a")
            net.add_host("b")
            start_echo(net, "a")
        assert one.hub != two.hub
        assert one.subnet != two.subnet
        assert wait_echo(one, "b", "a") == b"ping from b\n"
        assert wait_echo(two, "b", "a") == b"ping from b\n"
        one.cut("a", "b")
        assert_cut(one, "b", "a")
        assert echo_once(two, "b", "a") == b"ping from b\n"
        # Separate bridges: a host of one network cannot reach the other network at all.
        with two.socket("b") as sock:
            sock.settimeout(FAIL_FAST)
            with pytest.raises(OSError):
                sock.connect((one.address("a"), ECHO_PORT))


def test_stale_namespaces_of_a_dead_run_are_removed_with_their_processes() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = f"{netns.PREFIX}{dead.pid}-0-b1"
    netns.ip("netns", "add", stale)
    leftover = subprocess.Popen(["ip", "netns", "exec", stale, "sleep", "600"])
    try:
        with Network() as net:
            assert stale not in netns.namespaces()
            assert leftover.wait(timeout=10) == -9
            assert net.hub in netns.namespaces()
    finally:
        leftover.kill()
        netns.ip("netns", "del", stale, check=False)


def test_run_starts_the_program_itself_inside_the_host(network: Network) -> None:
    network.add_host("a")
    process = network.run("a", ["sleep", "600"])
    wanted = os.stat(NETNS_DIR / network.namespace("a")).st_ino
    deadline = time.monotonic() + 10
    # ``ip netns exec`` joins the namespace, then execs ``sleep`` in the same pid.
    while Path(f"/proc/{process.pid}/comm").read_text().strip() != "sleep":
        assert time.monotonic() < deadline, "ip netns exec did not exec the program"
        time.sleep(0.01)
    assert os.stat(f"/proc/{process.pid}/ns/net").st_ino == wanted


def test_oncelog_serve_in_a_host_answers_a_client_in_another(
    network: Network, tmp_path: Path
) -> None:
    network.add_host("b1")
    network.add_host("client")
    broker = network.broker("b1", tmp_path / "data").start()
    assert broker.ready_host == network.address("b1")
    topics = [sys.executable, "-m", "oncelog.cli.main", "topics", "list",
              "--bootstrap-server", broker.bootstrap, "--timeout-ms", "5000"]

    listed = network.run("client", topics, cwd=REPO_ROOT, env=broker.env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = listed.communicate(timeout=60)
    assert listed.returncode == 0, (out, err)

    with network.joined("client"):
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    # librdkafka's threads were started inside "client" and stay there.
    brokers = admin.list_topics(timeout=10).brokers.values()
    assert [b.host for b in brokers] == [network.address("b1")]

    network.cut("client", "b1")
    refused = network.run("client", topics, cwd=REPO_ROOT, env=broker.env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = refused.communicate(timeout=60)
    assert refused.returncode != 0, (out, err)
    assert "Traceback" not in err


def test_joined_moves_only_the_block_into_the_host(network: Network) -> None:
    network.add_host("a")
    network.add_host("b")
    start_echo(network, "a")
    wait_echo(network, "b", "a")
    home = os.stat("/proc/thread-self/ns/net").st_ino

    with network.joined("b"):
        assert os.stat("/proc/thread-self/ns/net").st_ino != home
        inside = socket.create_connection((network.address("a"), ECHO_PORT), timeout=2)

    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    with inside:
        inside.sendall(b"still inside\n")
        assert inside.recv(100) == b"still inside\n"


def test_not_root_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.os, "geteuid", lambda: 1000)
    with pytest.raises(NetnsUnavailable, match="need root"):
        Network()


def test_missing_ip_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(netns.shutil, "which", lambda name: None)
    with pytest.raises(NetnsUnavailable, match=r"`ip` command \(iproute2\)"):
        Network()


def test_a_grpc_client_reaches_a_host_through_a_unix_tunnel_while_grpc_runs_elsewhere(
    network: Network, etcd: EtcdProcess, tmp_path: Path
) -> None:
    """While a gRPC channel of the process is open in the root namespace (here: a store on
    the module's loopback etcd, as an earlier test on the same xdist worker may leave), a new
    gRPC channel connects from gRPC's threads in the root namespace even when built inside
    ``joined`` -- where the address reaches the host's default route, not the network. The
    Unix-socket tunnel reaches the network's etcd whatever namespace gRPC's threads are in."""
    network.add_host("etcd")
    network.add_host("client")
    inner = EtcdProcess(
        tmp_path / "etcd", host=network.address("etcd"), port=2379, peer_port=2380,
        argv_prefix=network.exec_prefix("etcd")).start()
    opened, release = threading.Event(), threading.Event()

    async def hold_root_channel() -> None:
        store = EtcdMetadataStore([(etcd.host, etcd.port)], prefix=unique_prefix())
        try:
            await store.load()
            opened.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait)
        finally:
            await store.close()

    holder = threading.Thread(target=asyncio.run, args=(hold_root_channel(),))
    holder.start()
    try:
        assert opened.wait(30), "no store on the loopback etcd"

        async def load(host: str) -> MetadataImage:
            store = EtcdMetadataStore([(host, inner.port)], prefix=unique_prefix())
            try:
                return await store.load()
            finally:
                await store.close()

        path = tmp_path / f"etcd:{inner.port}"
        with network.unix_tunnel("client", network.address("etcd"), inner.port, path):
            image = asyncio.run(load(f"unix:{tmp_path}/etcd"))
        assert image.controller is None and not image.brokers
    finally:
        release.set()
        holder.join()
        inner.kill()
