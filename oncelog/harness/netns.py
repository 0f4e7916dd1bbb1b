"""Network namespaces for cluster fault tests: hosts on a private bridge, cut by routes.

    with Network() as net:                       # or the ``network`` fixture (tests/cluster)
        net.add_host("etcd"); net.add_host("b1"); net.add_host("b2")
        server = net.run("b1", [sys.executable, "-m", "http.server", "-b", net.address("b1")])
        net.cut("b1", "b2")                      # b1 <-> b2 fail fast; etcd reaches both
        net.isolate("b1", keep=("etcd",))        # b1 reaches only etcd
        net.heal_all()
        with net.socket("b2") as sock: ...       # a socket created inside b2's namespace
        with net.joined("b2"): producer = Producer(...)   # a client living inside b2

What it builds, as root, with ``ip`` (iproute2) only — the host's own networking is never
touched (nothing is created in the root namespace, not even for a moment):

- a hub namespace ``ol<pid>-<seq>`` holding a bridge ``br0``;
- per host, a namespace ``ol<pid>-<seq>-<host>`` with loopback up and ``eth0``, one end of a
  veth pair whose other end (``h<index>``) is a port of the bridge in the hub (created there
  with ``ip -n HUB link add ... peer ... netns HOST``);
- addresses in one 10.X.Y.0/24 per Network (X.Y from the pid and a counter). The networks
  are isolated from each other and from the host anyway, so even two equal subnets could not
  collide.

Faults are routes inside the hosts' namespaces, no iptables: ``cut(a, b)`` adds a /32 route
of type ``unreachable`` (default), ``prohibit`` or ``blackhole`` to b in a and to a in b.
A more specific route wins over the subnet's, so a and b can neither connect nor exchange
anything on an established connection (each side's packets are dropped as they leave), and
the error is immediate on both sides: EHOSTUNREACH ("No route to host", what a client sees
when a real network answers with ICMP unreachable; the default), EACCES (prohibit) or EINVAL
(blackhole). Every other pair still talks. ``heal`` deletes the routes; ``isolate(a, keep)``
cuts a from every current host but ``keep``; ``heal_all`` deletes every cut.

Processes: ``run(host, argv, **popen)`` is ``subprocess.Popen(["ip", "netns", "exec", NS,
*argv])``; ``ip netns exec`` execs the command itself, so the Popen's pid is the program's
(signals such as SIGKILL / SIGSTOP reach it directly). ``exec_prefix(host)`` gives the
prefix for code that builds its own command line, and ``broker(host, data_dir, ...)`` a
``BrokerProcess`` (``oncelog serve``) listening on ``address(host):9092`` inside that host —
every namespace has its own ports, so the cluster fixture uses fixed ports and never races
for free ones. The cluster fixture (oncelog/harness/cluster.py) will: ``add_host("etcd")`` and
run etcd there on ``address("etcd"):2379``; ``add_host("b1")``.. and start each broker with
``net.broker("b1", data_dir, node_id=1, configs={"metadata.etcd.endpoints": ...})``, whose
advertised listener is its namespace address, so brokers reach each other over the bridge
where ``cut`` / ``isolate`` apply. The test process itself lives in the root namespace, which has
no route to these addresses of its own (a connection from there would leave by the host's
default route: never do that): it talks to the cluster from inside a host, either with
``net.socket(host)`` (a socket created in that namespace by a short-lived thread that joins
it with setns(2); the socket keeps its namespace when used from any thread), with a client
built inside ``with net.joined(host):`` (the calling thread joins the namespace for the
block; the client's sockets and the threads it starts there — librdkafka's — stay in it), or
with a client program started by ``net.run(host, ...)`` (the Java client) — typically from a
dedicated ``client`` host that is never cut. gRPC is the exception: its connections are made
by its own threads (in the root namespace while any channel of the process is open), so a
gRPC client goes through ``unix_tunnel(host, address, port, path)``, a Unix socket forwarded
from inside ``host``.

Clean-up: ``close()`` (``__exit__``, and at interpreter exit for a Network still open) kills
every process started by ``run``/``broker`` and every other process still inside its
namespaces, then deletes the namespaces (deleting a namespace destroys its veth ends and the
peer ends with them). A run killed before it could clean up leaves namespaces named after
its dead pid; the next Network deletes them (and kills what still runs in them) at start.
Not root, or no ``ip``: ``NetnsUnavailable`` with a message saying so (a test fails; it is
never skipped).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import itertools
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Self, TypeVar

from oncelog.harness.broker import BrokerProcess, default_argv_prefix

logger = logging.getLogger(__name__)

PREFIX = "ol"
NETNS_DIR = Path("/run/netns")
BROKER_PORT = 9092
RouteKind = Literal["unreachable", "prohibit", "blackhole"]

_HOST_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")
_OWNED_NAME = re.compile(rf"{PREFIX}(?P<pid>\d+)-\d+(?:-[a-z0-9]+)?")
_CLONE_NEWNET = 0x40000000
_SEQUENCE = itertools.count()
_OPEN: weakref.WeakSet[Network] = weakref.WeakSet()
T = TypeVar("T")


class NetnsUnavailable(RuntimeError):
    """Network namespaces cannot be built here (not root, no ``ip``); says what is missing."""


class NetnsCommandError(RuntimeError):
    """An ``ip`` command failed; the message has the command and its stderr."""


@atexit.register
def _close_leftovers() -> None:
    for network in list(_OPEN):
        network.close()


def ip(*args: str, check: bool = True) -> str:
    """Run ``ip ARGS`` and return its stdout; ``NetnsCommandError`` on failure (if ``check``)."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise NetnsCommandError(f"`ip {' '.join(args)}` failed ({result.returncode}): "
                                f"{result.stderr.strip()}")
    return result.stdout


def require_netns() -> None:
    """Raise ``NetnsUnavailable`` unless this process can create network namespaces."""
    if shutil.which("ip") is None:
        raise NetnsUnavailable(
            "the `ip` command (iproute2) is not on PATH; the network-namespace tests need it "
            "(Debian: apt-get install iproute2)")
    if os.geteuid() != 0:
        raise NetnsUnavailable(
            f"network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); this process "
            f"runs as uid {os.geteuid()}")


def namespaces() -> list[str]:
    """Names of every named network namespace (``ip netns list``)."""
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_inside(namespace: str) -> None:
    """SIGKILL every process still inside ``namespace`` (``ip netns pids``)."""
    for pid in ip("netns", "pids", namespace, check=False).split():
        if pid == str(os.getpid()):
            continue  # this process, when a thread was left inside by mistake
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
            logger.info("netns %s: killed leftover pid=%s", namespace, pid)


def remove_stale_namespaces() -> list[str]:
    """Delete the namespaces a dead process of ours left behind; returns their names."""
    removed = []
    for name in namespaces():
        match = _OWNED_NAME.fullmatch(name)
        if match is None or _pid_alive(int(match.group("pid"))):
            continue
        _kill_inside(name)
        ip("netns", "del", name, check=False)
        removed.append(name)
        logger.info("netns: removed stale namespace %s (owner pid %s is gone)",
                    name, match.group("pid"))
    return removed


def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def in_namespace(namespace: str, action: Callable[[], T]) -> T:
    """Call ``action`` in a new thread that has joined ``namespace``; return its result.

    Only that thread changes namespace (setns(2) acts on the calling thread) and it ends right
    after, so the caller's own namespace is untouched. What ``action`` creates — a socket —
    stays in ``namespace`` whichever thread uses it afterwards.
    """
    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            with joined(namespace):
                outcome.append(action())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name=f"netns-{namespace}")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]


@contextlib.contextmanager
def joined(namespace: str) -> Iterator[None]:
    """Run the calling thread inside ``namespace`` for the ``with`` block, then come back.

    Sockets created in the block, and threads started in it (librdkafka's, an asyncio loop's
    thread), stay in ``namespace`` after the block; the rest of the process never moves.
    An asyncio client opens its sockets later, in its loop's thread: run that loop in a
    thread started inside the block (or the whole coroutine inside it).
    """
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_DIR / namespace, os.O_RDONLY)
        try:
            _libc_setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _libc_setns(home)
    finally:
        os.close(home)


class Network:
    """A bridge in a hub namespace and one namespace per host; see the module docstring."""

    def __init__(self, *, route_kind: RouteKind = "unreachable") -> None:
        require_netns()
        self.route_kind: RouteKind = route_kind
        self.seq = next(_SEQUENCE)
        self.hub = f"{PREFIX}{os.getpid()}-{self.seq}"
        slot = (os.getpid() * 64 + self.seq) % (1 << 16)
        self.subnet = ipaddress.IPv4Network(f"10.{slot >> 8}.{slot & 0xFF}.0/24")
        self._hosts: dict[str, ipaddress.IPv4Address] = {}
        self._cuts: set[frozenset[str]] = set()
        self._processes: list[subprocess.Popen[Any]] = []
        self._brokers: list[BrokerProcess] = []
        self._created: list[str] = []
        self._closed = False
        remove_stale_namespaces()
        try:
            self._create_namespace(self.hub)
            ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self.hub, "link", "set", "br0", "up")
        except BaseException:
            self.close()
            raise
        _OPEN.add(self)
        logger.info("netns: network %s up, subnet %s", self.hub, self.subnet)

    # -- building ------------------------------------------------------------------------
    def _create_namespace(self, name: str) -> None:
        ip("netns", "add", name)
        self._created.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    def namespace(self, host: str) -> str:
        """The namespace name of ``host``."""
        self._check_host(host)
        return f"{self.hub}-{host}"

    def add_host(self, host: str) -> ipaddress.IPv4Address:
        """Create ``host`` (its namespace, its port on the bridge) and return its address."""
        if not _HOST_NAME.fullmatch(host):
            raise ValueError(f"host name {host!r}: 1-12 characters, a-z then a-z/0-9")
        if host in self._hosts:
            raise ValueError(f"host {host!r} already exists in {self.hub}")
        index = len(self._hosts) + 1
        if index >= self.subnet.num_addresses - 1:
            raise ValueError(f"{self.subnet} has no address left for {host!r}")
        address = self.subnet[index]
        namespace = f"{self.hub}-{host}"
        self._create_namespace(namespace)
        port = f"h{index}"
        ip("-n", self.hub, "link", "add", port, "type", "veth",
           "peer", "name", "eth0", "netns", namespace)
        ip("-n", self.hub, "link", "set", port, "master", "br0", "up")
        ip("-n", namespace, "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", "eth0")
        ip("-n", namespace, "link", "set", "eth0", "up")
        self._hosts[host] = address
        logger.info("netns: host %s in %s at %s (bridge port %s)", host, namespace, address, port)
        return address

    @property
    def hosts(self) -> list[str]:
        return list(self._hosts)

    def address(self, host: str) -> str:
        """The IPv4 address of ``host`` on the bridge."""
        self._check_host(host)
        return str(self._hosts[host])

    def _check_host(self, host: str) -> None:
        if host not in self._hosts:
            raise KeyError(f"no host {host!r} in network {self.hub} (hosts: {self.hosts})")

    # -- processes and sockets -----------------------------------------------------------
    def exec_prefix(self, host: str) -> list[str]:
        """``["ip", "netns", "exec", NS]``: put before a command to run it inside ``host``."""
        return ["ip", "netns", "exec", self.namespace(host)]

    def run(self, host: str, argv: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside ``host``; the process is killed when the network closes."""
        process: subprocess.Popen[Any] = subprocess.Popen(
            [*self.exec_prefix(host), *argv], **popen)
        self._processes.append(process)
        logger.info("netns: started pid=%d in %s: %s", process.pid, host, " ".join(argv))
        return process

    def broker(self, host: str, data_dir: Path, *, port: int = BROKER_PORT,
               **kwargs: Any) -> BrokerProcess:
        """An ``oncelog serve`` (not started) listening on ``address(host):port`` in ``host``.

        ``kwargs`` go to ``BrokerProcess`` (``node_id``, ``configs``, ``log_path``, ...). The
        broker is killed when the network closes, if the caller has not stopped it.
        """
        broker = BrokerProcess(
            data_dir, host=self.address(host), port=port,
            argv_prefix=[*self.exec_prefix(host), *default_argv_prefix()], **kwargs)
        self._brokers.append(broker)
        return broker

    def socket(self, host: str, family: socket.AddressFamily = socket.AF_INET,
               kind: socket.SocketKind = socket.SOCK_STREAM) -> socket.socket:
        """A new socket inside ``host``'s namespace (to connect or listen from the test)."""
        return in_namespace(self.namespace(host), lambda: socket.socket(family, kind))

    def joined(self, host: str) -> contextlib.AbstractContextManager[None]:
        """``with net.joined(host):`` the calling thread is inside ``host``; see ``joined``."""
        return joined(self.namespace(host))

    @contextlib.contextmanager
    def unix_tunnel(self, host: str, address: str, port: int, path: Path) -> Iterator[None]:
        """For the block, a Unix socket at ``path`` whose connections are forwarded to
        ``address:port`` from inside ``host``.

        For clients whose connections are not made by the calling thread: gRPC's are made by
        its own threads, which stay in the namespace of whoever started them while any
        channel of the process is open, so a gRPC client built inside ``joined`` can still
        connect from the root namespace (where the host's default route takes 10.X.Y.Z to
        whatever answers there). A Unix socket path belongs to no network namespace.
        """
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(path))
        listener.listen()
        open_sockets: list[socket.socket] = [listener]

        def pump(source: socket.socket, sink: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := source.recv(65536):
                    sink.sendall(data)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

        def accept() -> None:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return  # the listener was closed: the block ended
                upstream = self.socket(host)
                open_sockets.extend((client, upstream))
                try:
                    upstream.connect((address, port))
                except OSError as exc:
                    logger.info("netns: tunnel %s -> %s:%d in %s: %s",
                                path, address, port, host, exc)
                    client.close()
                    continue
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=pump, args=(a, b), daemon=True,
                                     name=f"tunnel-{host}").start()

        acceptor = threading.Thread(target=accept, daemon=True, name=f"tunnel-{host}")
        acceptor.start()
        try:
            yield
        finally:
            for sock in list(open_sockets):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            acceptor.join()
            path.unlink(missing_ok=True)

    # -- faults --------------------------------------------------------------------------
    def _route(self, action: str, host: str, peer: str, kind: RouteKind) -> None:
        ip("-n", self.namespace(host), "route", action, kind, f"{self.address(peer)}/32")

    def cut(self, a: str, b: str, *, kind: RouteKind | None = None) -> None:
        """a and b can no longer reach each other (both ways); every other pair still can."""
        if a == b:
            raise ValueError(f"cannot cut {a!r} from itself")
        pair = frozenset((a, b))
        if pair in self._cuts:
            return
        route = kind or self.route_kind
        self._route("add", a, b, route)
        self._route("add", b, a, route)
        self._cuts.add(pair)
        logger.info("netns %s: cut %s <-> %s (%s)", self.hub, a, b, route)

    def heal(self, a: str, b: str) -> None:
        """Undo ``cut(a, b)``; nothing happens if they were not cut."""
        pair = frozenset((a, b))
        if pair not in self._cuts:
            return
        for host, peer in ((a, b), (b, a)):
            ip("-n", self.namespace(host), "route", "del", f"{self.address(peer)}/32")
        self._cuts.discard(pair)
        logger.info("netns %s: healed %s <-> %s", self.hub, a, b)

    def isolate(self, host: str, keep: Iterable[str] = ("etcd",)) -> None:
        """Cut ``host`` from every current host except those in ``keep`` (if they exist)."""
        kept = set(keep)
        for other in self.hosts:
            if other != host and other not in kept:
                self.cut(host, other)

    def heal_all(self) -> None:
        """Undo every cut."""
        for pair in list(self._cuts):
            self.heal(*sorted(pair))

    @property
    def cuts(self) -> set[frozenset[str]]:
        return set(self._cuts)

    # -- teardown ------------------------------------------------------------------------
    def close(self) -> None:
        """Kill what runs inside, delete every namespace; safe to call more than once."""
        if self._closed:
            return
        self._closed = True
        _OPEN.discard(self)
        for broker in self._brokers:
            broker.kill()
        for process in self._processes:
            if process.poll() is None:
                process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        for name in reversed(self._created):
            _kill_inside(name)
            ip("netns", "del", name, check=False)
        logger.info("netns: network %s removed (%d namespaces)", self.hub, len(self._created))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Network {self.hub} {self.subnet} hosts={self.hosts} cuts={len(self._cuts)}>"
