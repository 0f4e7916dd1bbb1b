"""The fault proxy itself: against a tiny in-process Kafka-framed responder, and end to end
with confluent-kafka against the peer broker Tansu (started advertising the proxy)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.harness.fault_proxy import ANY_API, ApiKey, FaultProxy, FaultRules
from oncelog.harness.net import free_port
from tests.conftest import ProxiedBroker
from tests.support.names import unique_group, unique_topic
from tests.support.tansu import TansuProcess

# -- a minimal upstream: answers each request frame with (correlation id, api key) -----------


class Responder:
    """Replies to every request frame with a frame holding its correlation id and api key."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.received: list[tuple[int, int]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._thread.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            while True:
                frame = _recv_frame(conn)
                if frame is None:
                    return
                api_key, _version, correlation_id = struct.unpack_from(">hhi", frame)
                with self._lock:
                    self.received.append((api_key, correlation_id))
                try:
                    conn.sendall(_frame(struct.pack(">ih", correlation_id, api_key)))
                except OSError:
                    return

    def close(self) -> None:
        self.sock.close()


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _request(api_key: int, correlation_id: int, body: bytes = b"") -> bytes:
    return _frame(struct.pack(">hhih", api_key, 0, correlation_id, -1) + body)


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        try:
            chunk = sock.recv(n - len(data))
        except ConnectionResetError:
            return None
        if not chunk:
            return None
        data += chunk
    return data


def _recv_frame(sock: socket.socket) -> bytes | None:
    prefix = _recv_exactly(sock, 4)
    if prefix is None:
        return None
    return _recv_exactly(sock, struct.unpack(">i", prefix)[0])


def _read_response(sock: socket.socket) -> tuple[int, int] | None:
    """(correlation id, api key) of the next response, or None once the connection closed."""
    frame = _recv_frame(sock)
    if frame is None:
        return None
    correlation_id, api_key = struct.unpack(">ih", frame)
    return correlation_id, api_key


def _closed(sock: socket.socket) -> bool:
    sock.settimeout(5)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def responder() -> Iterator[Responder]:
    server = Responder()
    yield server
    server.close()


@pytest.fixture
def proxy(responder: Responder) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", responder.port) as p:
        yield p


def _connect(proxy: FaultProxy) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
    sock.settimeout(5)
    return sock


# -- framing and rules -----------------------------------------------------------------------


def test_transparent_by_default_and_counts_by_api_key(
    proxy: FaultProxy, responder: Responder
) -> None:
    with _connect(proxy) as sock:
        for correlation_id, api_key in enumerate([ApiKey.API_VERSIONS, ApiKey.METADATA, 0]):
            sock.sendall(_request(api_key, correlation_id))
            assert _read_response(sock) == (correlation_id, api_key)
    stats = proxy.wait_for(lambda s: s.connections_open == 0)
    assert stats.connections_accepted == 1
    assert stats.connections_cut == 0
    assert dict(stats.requests) == {18: 1, 3: 1, 0: 1}
    assert dict(stats.responses) == {18: 1, 3: 1, 0: 1}
    assert stats.bytes_to_upstream == 3 * 14
    assert stats.bytes_to_client == 3 * 10
    assert responder.received == [(18, 0), (3, 1), (0, 2)]


def test_pipelined_requests_split_across_reads(proxy: FaultProxy) -> None:
    """Frames arriving byte by byte and several per packet are both reassembled."""
    data = b"".join(_request(ApiKey.FETCH, i) for i in range(5))
    with _connect(proxy) as sock:
        for i in range(0, 20):
            sock.sendall(data[i : i + 1])
            time.sleep(0.001)
        sock.sendall(data[20:])
        assert [_read_response(sock) for _ in range(5)] == [(i, 1) for i in range(5)]
    assert proxy.stats().requests[ApiKey.FETCH] == 5


def test_drop_next_swallows_response_and_cuts_connection(
    proxy: FaultProxy, responder: Responder
) -> None:
    proxy.set_rules(FaultRules(drop_next={ApiKey.PRODUCE: 1}))
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.METADATA, 1))
        assert _read_response(sock) == (1, 3)
        sock.sendall(_request(ApiKey.PRODUCE, 2))
        assert _read_response(sock) is None
    # The broker side did process the request: only its acknowledgement was lost.
    assert (0, 2) in responder.received
    stats = proxy.wait_for(lambda s: s.connections_open == 0)
    assert stats.responses_dropped[ApiKey.PRODUCE] == 1
    assert stats.responses[ApiKey.PRODUCE] == 0
    assert stats.connections_cut == 1
    # The budget is used up: the next connection passes Produce responses again.
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.PRODUCE, 3))
        assert _read_response(sock) == (3, 0)


def test_drop_rate_applies_to_any_api_and_set_rules_restores(proxy: FaultProxy) -> None:
    proxy.set_rules(FaultRules(drop_rate={ANY_API: 1.0}))
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.FIND_COORDINATOR, 7))
        assert _read_response(sock) is None
    assert proxy.wait_for(lambda s: s.connections_cut == 1).responses_dropped[10] == 1
    proxy.set_rules(FaultRules(drop_rate={ApiKey.END_TXN: 1.0}))
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.FIND_COORDINATOR, 8))
        assert _read_response(sock) == (8, 10)


def test_drop_rate_share_is_seeded_and_roughly_right(proxy: FaultProxy) -> None:
    def run() -> int:
        proxy.set_rules(FaultRules(drop_rate={ApiKey.FETCH: 0.5}, seed=42))
        dropped = 0
        for i in range(40):
            with _connect(proxy) as sock:
                sock.sendall(_request(ApiKey.FETCH, i))
                dropped += _read_response(sock) is None
        return dropped

    first = run()
    assert 8 <= first <= 32
    assert run() == first


def test_drop_requests_next_never_reaches_upstream(
    proxy: FaultProxy, responder: Responder
) -> None:
    proxy.set_rules(FaultRules(drop_requests_next={ApiKey.INIT_PRODUCER_ID: 1}))
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.INIT_PRODUCER_ID, 1))
        assert _closed(sock)
    assert proxy.wait_for(lambda s: s.connections_cut == 1).requests_dropped[22] == 1
    assert responder.received == []


def test_delay_holds_response_and_keeps_order(proxy: FaultProxy) -> None:
    proxy.set_rules(FaultRules(delay={ApiKey.FETCH: 0.3}))
    with _connect(proxy) as sock:
        start = time.monotonic()
        sock.sendall(_request(ApiKey.FETCH, 1) + _request(ApiKey.METADATA, 2))
        assert _read_response(sock) == (1, 1)
        assert time.monotonic() - start >= 0.3
        assert _read_response(sock) == (2, 3)
    stats = proxy.stats()
    assert stats.responses_delayed[ApiKey.FETCH] == 1
    assert stats.responses_delayed[ApiKey.METADATA] == 0


def test_hold_responses_keeps_answers_until_the_rules_change(
    proxy: FaultProxy, responder: Responder
) -> None:
    """The upstream has answered (the proxy counts the held response), the client has not
    heard; later answers on the connection wait behind it; new rules release them in order."""
    proxy.set_rules(FaultRules(hold_responses=frozenset({ApiKey.ADD_PARTITIONS_TO_TXN})))
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.ADD_PARTITIONS_TO_TXN, 1) + _request(ApiKey.METADATA, 2))
        stats = proxy.wait_for(
            lambda s: s.responses_held.get(ApiKey.ADD_PARTITIONS_TO_TXN, 0) == 1
            and not s.in_flight.get(ApiKey.METADATA, 0) and s.requests[ApiKey.METADATA] == 1)
        assert responder.received == [(ApiKey.ADD_PARTITIONS_TO_TXN, 1), (ApiKey.METADATA, 2)]
        assert not stats.responses  # nothing reached the client yet
        proxy.set_rules(FaultRules())
        assert _read_response(sock) == (1, ApiKey.ADD_PARTITIONS_TO_TXN)
        assert _read_response(sock) == (2, ApiKey.METADATA)
    assert proxy.stats().responses_held[ApiKey.METADATA] == 0


def test_cut_after_bytes_cuts_mid_frame(proxy: FaultProxy) -> None:
    # 14 request bytes + 6 of the 10-byte response, then the connection ends.
    proxy.set_rules(FaultRules(cut_after_bytes=20))
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.METADATA, 1))
        assert _recv_exactly(sock, 6) == struct.pack(">ii", 6, 1)[:6]
        assert _closed(sock)
    stats = proxy.wait_for(lambda s: s.connections_cut == 1)
    assert stats.bytes_to_client == 6


def test_refuse_and_cut_all(proxy: FaultProxy) -> None:
    with _connect(proxy) as open_sock:
        open_sock.sendall(_request(ApiKey.HEARTBEAT, 1))
        assert _read_response(open_sock) == (1, 12)
        proxy.set_rules(FaultRules(refuse=True))
        with _connect(proxy) as refused:
            assert _closed(refused)
        assert proxy.stats().connections_refused == 1
        assert proxy.cut_all() == 1
        assert _closed(open_sock)
    proxy.set_rules()
    with _connect(proxy) as sock:
        sock.sendall(_request(ApiKey.HEARTBEAT, 2))
        assert _read_response(sock) == (2, 12)


def test_upstream_down_closes_client() -> None:
    with FaultProxy("127.0.0.1", free_port()) as proxy, _connect(proxy) as sock:
        assert _closed(sock)
        assert proxy.wait_for(lambda s: s.upstream_failures == 1).connections_open == 0


def test_rules_are_validated() -> None:
    with pytest.raises(ValueError):
        FaultRules(drop_rate={0: 1.5})
    with pytest.raises(ValueError):
        FaultRules(delay={1: -1.0})


def test_stop_closes_listener(responder: Responder) -> None:
    proxy = FaultProxy("127.0.0.1", responder.port).start()
    port = proxy.port
    proxy.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


# -- end to end with a real client and broker ------------------------------------------------


@pytest.fixture
def tansu_behind_proxy(tmp_path: Path) -> Iterator[tuple[TansuProcess, FaultProxy]]:
    broker_port = free_port()
    with FaultProxy("127.0.0.1", broker_port) as proxy:
        tansu = TansuProcess(tmp_path / "tansu.log", port=broker_port, advertised=proxy.bootstrap)
        with tansu.start():
            yield tansu, proxy


def test_real_client_goes_through_proxy_and_survives_lost_ack(
    tansu_behind_proxy: tuple[TansuProcess, FaultProxy],
) -> None:
    tansu, proxy = tansu_behind_proxy
    topic = unique_topic()
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(10)
    # Metadata advertises the proxy, not the broker's own port.
    brokers = admin.list_topics(timeout=10).brokers
    assert {f"{b.host}:{b.port}" for b in brokers.values()} == {proxy.bootstrap}

    proxy.set_rules(FaultRules(drop_next={ApiKey.PRODUCE: 1}))
    producer = Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "acks": "all",
            "linger.ms": 0,
            "retry.backoff.ms": 20,
            "reconnect.backoff.ms": 20,
        }
    )
    errors: list[object] = []
    producer.produce(topic, b"v0", on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert producer.flush(20) == 0
    assert errors == []
    stats = proxy.stats()
    assert stats.responses_dropped[ApiKey.PRODUCE] == 1
    assert stats.responses[ApiKey.PRODUCE] >= 1
    assert stats.connections_cut >= 1

    consumer = Consumer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "group.id": unique_group(),
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        values: list[bytes | None] = []
        deadline = time.monotonic() + 15
        while not values and time.monotonic() < deadline:
            for message in consumer.consume(10, 0.5):
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    # The request was applied before its response was lost; a retry may have duplicated it.
    assert values and set(values) == {b"v0"}
    assert proxy.stats().requests[ApiKey.FETCH] >= 1
    assert tansu.is_running


@pytest.mark.integration
def test_proxied_broker_fixture_routes_oncelog_clients_through_proxy(
    proxied_broker: ProxiedBroker,
) -> None:
    proxy = proxied_broker.proxy
    assert proxied_broker.bootstrap == proxy.bootstrap != proxied_broker.broker.bootstrap
    topic = unique_topic()
    admin = AdminClient({"bootstrap.servers": proxied_broker.bootstrap})
    brokers = admin.list_topics(topic, timeout=10).brokers
    assert {f"{b.host}:{b.port}" for b in brokers.values()} == {proxy.bootstrap}
    proxy.set_rules(FaultRules(delay={ApiKey.PRODUCE: 0.2}))
    producer = Producer({"bootstrap.servers": proxied_broker.bootstrap, "acks": "all"})
    start = time.monotonic()
    producer.produce(topic, b"through the proxy")
    assert producer.flush(20) == 0
    assert time.monotonic() - start >= 0.2
    assert proxy.stats().responses_delayed[ApiKey.PRODUCE] >= 1
