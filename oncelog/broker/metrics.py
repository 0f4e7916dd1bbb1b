"""Broker metrics: collected on demand, exposed as Prometheus text over HTTP.

``collect(services)`` takes a snapshot of what the exactly-once machinery looks like right now
(KIP-98's "live producer ids, LSO per partition, active transactional ids, oldest open
transaction age", plus KIP-939's longest-open transaction and the group coordinator's
counts); ``render`` writes it in the Prometheus text exposition format (version 0.0.4).
``serve_metrics`` answers ``GET /metrics`` with it: a minimal HTTP/1.1 responder (one
request per connection, ``Connection: close``), started by the broker in its TaskGroup when
``oncelog serve --metrics HOST:PORT`` is given. The endpoint is bound before the broker's
services exist (a busy port fails first), so it is given a ``scrape`` callable; collection
reads only the ``BrokerContext``.

Names follow Kafka's meaning with a ``oncelog_`` prefix; ages and durations are in ms.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oncelog.coordinator.transaction.state import TransactionState
from oncelog.errors import ErrorCode
from oncelog.http_exchange import answer_once

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METRICS_PATH = "/metrics"
_REQUEST_TIMEOUT_S = 10.0
_MAX_REQUEST_HEAD = 16 * 1024
_OPEN_STATES = (
    TransactionState.ONGOING.wire_name,
    TransactionState.PREPARE_COMMIT.wire_name,
    TransactionState.PREPARE_ABORT.wire_name,
)

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Labels
    value: float


@dataclass(slots=True)
class MetricFamily:
    name: str
    kind: str  # "gauge" or "counter"
    help: str
    samples: list[Sample] = field(default_factory=list)

    def add(self, value: float, **labels: str) -> None:
        self.samples.append(Sample(tuple(labels.items()), value))


@dataclass(frozen=True, slots=True)
class LongestOpen:
    transactional_id: str
    age_ms: int
    two_phase_commit: bool
    state: str


def longest_open_transaction(services: BrokerContext) -> LongestOpen | None:
    """The open (Ongoing or Prepare*) transaction that began longest ago, if any."""
    coordinator = services.transactions
    listed = coordinator.list_transactions(state_filters=_OPEN_STATES)
    if listed.error is not ErrorCode.none or not listed.transactions:
        return None
    now = services.clock.now_ms()
    best: LongestOpen | None = None
    for d in coordinator.describe_transactions(t.transactional_id for t in listed.transactions):
        if d.error is not ErrorCode.none or d.start_timestamp_ms < 0 or d.state is None:
            continue
        age = max(0, now - d.start_timestamp_ms)
        if best is None or age > best.age_ms:
            best = LongestOpen(d.transactional_id, age, d.two_phase_commit, d.state.wire_name)
    return best


def collect(services: BrokerContext) -> list[MetricFamily]:
    """A snapshot of the broker's metrics (cheap: no I/O, one pass over the partitions)."""
    live_total = MetricFamily(
        "oncelog_producer_ids_live", "gauge",
        "Producer ids with state on this broker, summed over its partitions.",
    )
    live = MetricFamily(
        "oncelog_partition_producer_ids_live", "gauge",
        "Producer ids with state (epoch, sequences, open transaction) in a partition.",
    )
    hw = MetricFamily(
        "oncelog_partition_high_watermark", "gauge", "High watermark of a partition.",
    )
    lso = MetricFamily(
        "oncelog_partition_last_stable_offset", "gauge",
        "Last stable offset: read_committed consumers read below it.",
    )
    lag = MetricFamily(
        "oncelog_partition_unstable_records", "gauge",
        "High watermark minus LSO: records held back from read_committed consumers.",
    )
    open_here = MetricFamily(
        "oncelog_partition_open_transactions", "gauge",
        "Transactions with records in a partition and no marker yet.",
    )
    total = 0
    for partition in sorted(services.partitions.partitions(), key=lambda p: (p.topic, p.index)):
        labels = {"topic": partition.topic, "partition": str(partition.index)}
        count = len(partition.producers())
        total += count
        live.add(count, **labels)
        hw.add(partition.high_watermark, **labels)
        lso.add(partition.last_stable_offset, **labels)
        lag.add(partition.high_watermark - partition.last_stable_offset, **labels)
        open_here.add(partition.open_transactions(), **labels)
    live_total.add(total)
    families = [live_total, live, hw, lso, lag, open_here]
    families += _transaction_families(services)
    families += _group_families(services)
    families += _cleaner_families(services)
    families += _cluster_families(services)
    return families


def _cluster_families(services: BrokerContext) -> list[MetricFamily]:
    """Cluster mode: replication (Kafka's UnderReplicatedPartitions, IsrShrinksPerSec,
    IsrExpandsPerSec); nothing on a single node."""
    out: list[MetricFamily] = []
    replication = services.replication
    if replication is not None:
        for name, kind, text, value in (
            ("oncelog_under_replicated_partitions", "gauge",
             "Partitions this broker leads whose ISR is smaller than their replicas.",
             replication.under_replicated()),
            ("oncelog_isr_shrinks_total", "counter",
             "ISR shrinks this broker wrote as leader.", replication.stats.isr_shrinks),
            ("oncelog_isr_expands_total", "counter",
             "ISR expansions this broker wrote as leader.", replication.stats.isr_expands),
        ):
            family = MetricFamily(name, kind, text)
            family.add(value)
            out.append(family)
    return out


def _cleaner_families(services: BrokerContext) -> list[MetricFamily]:
    """The log cleaner's view of each compacted partition (Kafka's max-dirty-percent and
    time-since-last-run, per partition)."""
    ratio = MetricFamily(
        "oncelog_partition_cleaner_dirty_ratio", "gauge",
        "Dirty bytes over cleanable bytes of a compacted partition, as the cleaner last "
        "computed it.",
    )
    last = MetricFamily(
        "oncelog_partition_cleaner_last_clean_timestamp_ms", "gauge",
        "When the log cleaner last compacted a partition (-1: not since the broker started).",
    )
    passes = MetricFamily(
        "oncelog_partition_cleaner_failed", "gauge",
        "1 when the last cleaning pass of a partition failed (it is retried).",
    )
    cleaner = services.cleaner
    if cleaner is None:
        return []
    for partition in sorted(services.partitions.partitions(), key=lambda p: (p.topic, p.index)):
        status = cleaner.status(partition.topic, partition.index)
        if status is None:
            continue
        labels = {"topic": partition.topic, "partition": str(partition.index)}
        ratio.add(status.dirty_ratio, **labels)
        last.add(status.last_clean_ms, **labels)
        passes.add(1 if status.state == "failed" else 0, **labels)
    return [ratio, last, passes]


def _transaction_families(services: BrokerContext) -> list[MetricFamily]:
    stats = services.transactions.statistics()

    def single(name: str, kind: str, text: str, value: float) -> MetricFamily:
        family = MetricFamily(name, kind, text)
        family.add(value)
        return family

    families = [
        single("oncelog_transactional_ids", "gauge",
               "Transactional ids the transaction coordinator knows.", stats.transactional_ids),
        single("oncelog_transactions_active", "gauge",
               "Open transactions (Ongoing, PrepareCommit, PrepareAbort).",
               stats.open_transactions),
        single("oncelog_transactions_two_phase_commit_active", "gauge",
               "Open KIP-939 two-phase-commit transactions (they never time out).",
               stats.two_phase_commit_transactions),
        single("oncelog_transaction_oldest_open_age_ms", "gauge",
               "Age of the oldest open transaction (0 when none is open).",
               stats.oldest_open_transaction_age_ms),
        single("oncelog_transaction_markers_in_flight", "gauge",
               "Transactions whose COMMIT/ABORT markers are being written.",
               stats.markers_in_flight),
        single("oncelog_transaction_marker_retries_total", "counter",
               "Marker writes retried since the broker started.", stats.marker_retries),
        single("oncelog_transaction_timed_out_aborts_total", "counter",
               "Transactions aborted by the coordinator after their timeout.",
               stats.timed_out_aborts),
        single("oncelog_transactional_ids_expired_total", "counter",
               "Transactional ids removed after transactional.id.expiration.ms.",
               stats.expired_transactional_ids),
    ]
    longest = MetricFamily(
        "oncelog_transaction_longest_open", "gauge",
        "Age in ms of the transaction open longest, labelled with its id and whether it is "
        "a two-phase-commit (KIP-939) transaction; absent when none is open.",
    )
    found = longest_open_transaction(services)
    if found is not None:
        longest.add(
            found.age_ms,
            transactional_id=found.transactional_id,
            two_phase="true" if found.two_phase_commit else "false",
            state=found.state,
        )
    families.append(longest)
    return families


def _group_families(services: BrokerContext) -> list[MetricFamily]:
    stats = services.groups.statistics()
    groups = MetricFamily("oncelog_groups", "gauge", "Consumer groups, by state.")
    for state, count in sorted(stats.groups_by_state.items()):
        groups.add(count, state=state)
    out = [groups]
    for name, text, value in (
        ("oncelog_group_members", "Members of consumer groups.", stats.members),
        ("oncelog_group_committed_offsets", "Committed offsets held by the group coordinator.",
         stats.committed_offsets),
        ("oncelog_group_pending_transactional_offsets",
         "Offsets committed inside transactions that have not ended yet.",
         stats.pending_txn_offsets),
    ):
        family = MetricFamily(name, "gauge", text)
        family.add(value)
        out.append(family)
    return out


@dataclass(slots=True)
class ControllerStats:
    """Counters the cluster's controller shell updates (oncelog.broker.cluster.controller),
    named after Kafka's controller metrics (ActiveControllerCount, ControllerStats'
    LeaderElectionRateAndTimeMs and UncleanLeaderElectionsPerSec)."""

    active: bool = False
    leader_elections: int = 0
    unclean_leader_elections: int = 0
    controlled_shutdowns: int = 0
    cas_conflicts: int = 0

    def families(self) -> list[MetricFamily]:
        out = []
        for name, kind, text, value in (
            ("oncelog_controller_active", "gauge",
             "1 on the broker that is the cluster's controller, else 0.", int(self.active)),
            ("oncelog_controller_leader_elections_total", "counter",
             "Partition leader changes this broker wrote as controller.",
             self.leader_elections),
            ("oncelog_controller_unclean_leader_elections_total", "counter",
             "Leader elections that chose a replica outside the ISR.",
             self.unclean_leader_elections),
            ("oncelog_controller_controlled_shutdowns_total", "counter",
             "Controlled shutdowns of brokers this controller handled.",
             self.controlled_shutdowns),
            ("oncelog_controller_write_conflicts_total", "counter",
             "Partition state writes refused because the state had changed (re-decided).",
             self.cas_conflicts),
        ):
            family = MetricFamily(name, kind, text)
            family.add(value)
            out.append(family)
        return out


# ------------------------------------------------------------------------ text format

def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))


def render(families: Iterable[MetricFamily]) -> str:
    """The Prometheus text exposition format (one HELP and TYPE line per family)."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {family.help.replace(chr(10), ' ')}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for sample in family.samples:
            if sample.labels:
                inner = ",".join(f'{k}="{_escape_label(v)}"' for k, v in sample.labels)
                lines.append(f"{family.name}{{{inner}}} {_number(sample.value)}")
            else:
                lines.append(f"{family.name} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------ HTTP

def _response(status: str, body: bytes, content_type: str, *, head_only: bool,
              extra: str = "") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + (b"" if head_only else body)


def answer(request_head: bytes, scrape: Callable[[], str]) -> bytes:
    """The whole HTTP response to one request head (sans-IO, so it is tested directly)."""
    text = "text/plain; charset=utf-8"
    try:
        request_line = request_head.split(b"\r\n", 1)[0].decode("ascii")
        method, target, version = request_line.split(" ")
    except (UnicodeDecodeError, ValueError):
        return _response("400 Bad Request", b"bad request\n", text, head_only=False)
    if not version.startswith("HTTP/1."):
        return _response("505 HTTP Version Not Supported", b"HTTP/1.x only\n", text,
                         head_only=False)
    head_only = method == "HEAD"
    if method not in ("GET", "HEAD"):
        return _response("405 Method Not Allowed", b"GET or HEAD only\n", text,
                         head_only=False, extra="Allow: GET, HEAD\r\n")
    path = target.split("?", 1)[0]
    if path != METRICS_PATH:
        return _response("404 Not Found", f"try {METRICS_PATH}\n".encode(), text,
                         head_only=head_only)
    try:
        body = scrape().encode()
    except Exception:
        log.exception("collecting metrics failed")
        return _response("500 Internal Server Error", b"collecting metrics failed\n", text,
                         head_only=head_only)
    return _response("200 OK", body, CONTENT_TYPE, head_only=head_only)


async def _handle(
    scrape: Callable[[], str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    async def respond(reader: asyncio.StreamReader) -> bytes:
        return answer(await reader.readuntil(b"\r\n\r\n"), scrape)

    await answer_once(reader, writer, respond, what="metrics", timeout_s=_REQUEST_TIMEOUT_S)


def scraper(
    services: BrokerContext, controller: ControllerStats | None = None
) -> Callable[[], str]:
    """What ``GET /metrics`` answers for ``services``: the rendered ``collect``, with the
    controller shell's counters in cluster mode."""

    def scrape() -> str:
        extra = [] if controller is None else controller.families()
        return render(collect(services) + extra)

    return scrape


async def bind_metrics(host: str, port: int, scrape: Callable[[], str]) -> asyncio.Server:
    """Bind ``host:port`` for ``GET /metrics`` without accepting yet (an OSError if the
    address cannot be bound); ``serve_metrics`` then serves it, answering ``scrape()``."""
    return await asyncio.start_server(
        functools.partial(_handle, scrape), host, port, limit=_MAX_REQUEST_HEAD,
        start_serving=False,
    )


async def serve_metrics(server: asyncio.Server) -> None:
    """Answer ``GET /metrics`` on a bound server until cancelled."""
    bound = server.sockets[0].getsockname()
    log.info("metrics on http://%s:%d%s", bound[0], bound[1], METRICS_PATH)
    async with server:
        await server.serve_forever()
