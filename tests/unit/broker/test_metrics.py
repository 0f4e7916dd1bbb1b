"""oncelog.broker.metrics: collection over fake broker parts, the Prometheus text format
(read back by ``oncelog metrics``' parser), the sans-IO HTTP answer, and the real server."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.broker import metrics
from oncelog.broker.cluster.replica_manager import ReplicationStats
from oncelog.broker.log_cleaner import CleanerStatus
from oncelog.broker.metrics import ControllerStats
from oncelog.cli.metrics import parse
from oncelog.clock import FakeClock
from oncelog.coordinator.group.results import CoordinatorStatistics
from oncelog.coordinator.transaction.results import (
    DescribedTransaction,
    ListedTransaction,
    ListTransactionsResult,
    TxnCoordinatorStatistics,
)
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.errors import ErrorCode

NOW = 1_000_000
TWO_PC_TIMEOUT = 2**31 - 1


def partition(topic: str, index: int, hw: int, lso: int, producers: int,
              open_offsets: list[int]) -> Any:
    return SimpleNamespace(
        topic=topic, index=index, high_watermark=hw, last_stable_offset=lso,
        producers=lambda: [object()] * producers,
        open_transactions=lambda: len(open_offsets),
    )


class FakeTransactions:
    def __init__(self, txns: list[DescribedTransaction], loaded: bool = True) -> None:
        self.txns = {t.transactional_id: t for t in txns}
        self.loaded = loaded
        self.state_filters: tuple[str, ...] = ()

    def statistics(self) -> TxnCoordinatorStatistics:
        open_ones = [t for t in self.txns.values() if t.state is TransactionState.ONGOING]
        return TxnCoordinatorStatistics(
            transactional_ids=len(self.txns),
            open_transactions=len(open_ones),
            two_phase_commit_transactions=sum(1 for t in open_ones if t.two_phase_commit),
            oldest_open_transaction_age_ms=max(
                (NOW - t.start_timestamp_ms for t in open_ones), default=0
            ),
            markers_in_flight=0, marker_retries=2, timed_out_aborts=1,
            expired_transactional_ids=0,
        )

    def list_transactions(self, state_filters: tuple[str, ...] = ()) -> ListTransactionsResult:
        self.state_filters = tuple(state_filters)
        if not self.loaded:
            return ListTransactionsResult(ErrorCode.coordinator_load_in_progress)
        return ListTransactionsResult(ErrorCode.none, (), tuple(
            ListedTransaction(t.transactional_id, t.producer_id, t.state)
            for t in self.txns.values()
            if t.state is not None and t.state.wire_name in state_filters
        ))

    def describe_transactions(self, ids: Any) -> list[DescribedTransaction]:
        return [self.txns[i] for i in ids]


def described(txn_id: str, state: TransactionState, start: int, two_phase: bool = False,
              ) -> DescribedTransaction:
    return DescribedTransaction(
        txn_id, ErrorCode.none, state, producer_id=len(txn_id), producer_epoch=0,
        timeout_ms=TWO_PC_TIMEOUT if two_phase else 60000, start_timestamp_ms=start,
        two_phase_commit=two_phase,
    )


def fake_broker(txns: list[DescribedTransaction], *, loaded: bool = True) -> Any:
    parts = [
        partition("orders", 1, hw=10, lso=10, producers=2, open_offsets=[]),
        partition("orders", 0, hw=7, lso=4, producers=3, open_offsets=[4, 6]),
    ]
    groups = CoordinatorStatistics(
        groups=2, groups_by_state={"Stable": 1, "Empty": 1}, members=3, pending_members=0,
        committed_offsets=5, waiting_joins=0, waiting_syncs=0, records_loaded=0,
        pending_txn_offsets=1,
    )
    return SimpleNamespace(
        partitions=SimpleNamespace(partitions=lambda: iter(parts)),
        transactions=FakeTransactions(txns, loaded),
        groups=SimpleNamespace(statistics=lambda: groups),
        clock=FakeClock(NOW),
        replication=None,
        cleaner=SimpleNamespace(status=lambda topic, index: CleanerStatus(
            0.25, NOW - 5, "failed" if index else "idle") if topic == "orders" else None),
    )


def scrape(broker: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], str]:
    text = metrics.render(metrics.collect(broker))
    return {(m.name, tuple(sorted(m.labels.items()))): m.value for m in parse(text)}


def test_cluster_metrics_only_in_cluster_mode() -> None:
    single = scrape(fake_broker([]))
    assert not [k for k in single if "isr" in k[0] or "controller" in k[0]
                or "under_replicated" in k[0]]
    broker = fake_broker([])
    broker.replication = SimpleNamespace(
        under_replicated=lambda: 2, stats=ReplicationStats(isr_shrinks=3, isr_expands=1))
    controller = ControllerStats(active=True, leader_elections=4)
    text = metrics.scraper(broker, controller)()
    got = {(m.name, tuple(sorted(m.labels.items()))): m.value for m in parse(text)}
    assert got[("oncelog_under_replicated_partitions", ())] == "2"
    assert got[("oncelog_isr_shrinks_total", ())] == "3"
    assert got[("oncelog_isr_expands_total", ())] == "1"
    assert got[("oncelog_controller_leader_elections_total", ())] == "4"
    assert got[("oncelog_controller_active", ())] == "1"


def test_collect_partitions_transactions_and_groups() -> None:
    broker = fake_broker([
        described("plain", TransactionState.ONGOING, NOW - 500),
        described("tpc", TransactionState.ONGOING, NOW - 2000, two_phase=True),
        described("done", TransactionState.COMPLETE_COMMIT, NOW - 9000),
    ])
    got = scrape(broker)
    p0 = (("partition", "0"), ("topic", "orders"))
    assert got[("oncelog_producer_ids_live", ())] == "5"
    assert got[("oncelog_partition_producer_ids_live", p0)] == "3"
    assert got[("oncelog_partition_high_watermark", p0)] == "7"
    assert got[("oncelog_partition_last_stable_offset", p0)] == "4"
    assert got[("oncelog_partition_unstable_records", p0)] == "3"
    assert got[("oncelog_partition_open_transactions", p0)] == "2"
    assert got[("oncelog_transactions_active", ())] == "2"
    assert got[("oncelog_transactions_two_phase_commit_active", ())] == "1"
    assert got[("oncelog_transaction_oldest_open_age_ms", ())] == "2000"
    assert got[("oncelog_transaction_marker_retries_total", ())] == "2"
    longest = [k for k in got if k[0] == "oncelog_transaction_longest_open"]
    assert longest == [("oncelog_transaction_longest_open", (
        ("state", "Ongoing"), ("transactional_id", "tpc"), ("two_phase", "true")))]
    assert got[longest[0]] == "2000"
    assert got[("oncelog_groups", (("state", "Stable"),))] == "1"
    assert got[("oncelog_group_pending_transactional_offsets", ())] == "1"
    assert got[("oncelog_partition_cleaner_dirty_ratio", p0)] == "0.25"
    assert got[("oncelog_partition_cleaner_last_clean_timestamp_ms", p0)] == str(NOW - 5)
    assert got[("oncelog_partition_cleaner_failed", p0)] == "0"
    # Only open states are asked for, with Kafka's names.
    assert set(broker.transactions.state_filters) == {"Ongoing", "PrepareCommit", "PrepareAbort"}


def test_partitions_are_sorted_and_the_longest_is_absent_when_nothing_is_open() -> None:
    broker = fake_broker([described("done", TransactionState.EMPTY, -1)])
    text = metrics.render(metrics.collect(broker))
    lso = [line for line in text.splitlines()
           if line.startswith("oncelog_partition_last_stable_offset{")]
    assert lso == [
        'oncelog_partition_last_stable_offset{topic="orders",partition="0"} 4',
        'oncelog_partition_last_stable_offset{topic="orders",partition="1"} 10',
    ]
    assert "# TYPE oncelog_transaction_longest_open gauge" in text
    assert "\noncelog_transaction_longest_open{" not in text
    assert metrics.longest_open_transaction(broker) is None


def test_a_loading_coordinator_has_no_longest_open() -> None:
    broker = fake_broker([described("x", TransactionState.ONGOING, NOW - 5)], loaded=False)
    assert metrics.longest_open_transaction(broker) is None


def test_render_escapes_label_values_and_parse_reads_them_back() -> None:
    family = metrics.MetricFamily("oncelog_x", "gauge", "help\nwith newline")
    family.add(1.5, transactional_id='we"ird\\id\nx', two_phase="false")
    family.add(3)
    text = metrics.render([family])
    assert "# HELP oncelog_x help with newline" in text
    assert 'transactional_id="we\\"ird\\\\id\\nx"' in text
    samples = parse(text)
    assert samples[0].labels == {"transactional_id": 'we"ird\\id\nx', "two_phase": "false"}
    assert samples[0].value == "1.5"
    assert (samples[1].labels, samples[1].value) == ({}, "3")


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", b"200 OK"),
        (b"GET /metrics?name=x HTTP/1.0\r\n\r\n", b"200 OK"),
        (b"GET / HTTP/1.1\r\n\r\n", b"404 Not Found"),
        (b"POST /metrics HTTP/1.1\r\n\r\n", b"405 Method Not Allowed"),
        (b"garbage\r\n\r\n", b"400 Bad Request"),
        (b"GET /metrics SPDY/3\r\n\r\n", b"505 HTTP Version Not Supported"),
    ],
)
def test_answer(head: bytes, status: bytes) -> None:
    response = metrics.answer(head, lambda: "oncelog_x 1\n")
    assert response.startswith(b"HTTP/1.1 " + status + b"\r\n")
    headers, _, body = response.partition(b"\r\n\r\n")
    assert f"Content-Length: {len(body)}".encode() in headers
    assert b"Connection: close" in headers
    if status == b"200 OK":
        assert body == b"oncelog_x 1\n"
        assert b"text/plain; version=0.0.4" in headers


def test_head_has_no_body_and_a_failing_scrape_is_a_500() -> None:
    head = metrics.answer(b"HEAD /metrics HTTP/1.1\r\n\r\n", lambda: "oncelog_x 1\n")
    assert head.endswith(b"\r\n\r\n") and b"Content-Length: 12" in head

    def broken() -> str:
        raise RuntimeError("boom")

    assert metrics.answer(b"GET /metrics HTTP/1.1\r\n\r\n", broken).startswith(
        b"HTTP/1.1 500 "
    )


def test_serve_metrics_over_a_socket() -> None:
    broker = fake_broker([described("plain", TransactionState.ONGOING, NOW - 50)])

    async def body() -> bytes:
        server = await metrics.bind_metrics("127.0.0.1", 0, metrics.scraper(broker))
        port = server.sockets[0].getsockname()[1]
        task = asyncio.create_task(metrics.serve_metrics(server))
        try:
            for _ in range(100):
                try:
                    reader, writer = await asyncio.open_connection("127.0.0.1", port)
                    break
                except OSError:
                    await asyncio.sleep(0.01)
            # Sent in pieces: the server waits for the whole head.
            writer.write(b"GET /metr")
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.write(b"ics HTTP/1.1\r\nHost: t\r\n\r\n")
            data = await reader.read()
            writer.close()
            return data
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    data = asyncio.run(body())
    assert data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\noncelog_transactions_active 1\n" in data


def test_controller_stats_render_as_counters_and_a_gauge() -> None:
    stats = metrics.ControllerStats(active=True, leader_elections=3, unclean_leader_elections=1)
    text = metrics.render(stats.families())
    assert "# TYPE oncelog_controller_leader_elections_total counter" in text
    assert "oncelog_controller_leader_elections_total 3" in text
    assert "oncelog_controller_unclean_leader_elections_total 1" in text
    assert "oncelog_controller_active 1" in text
