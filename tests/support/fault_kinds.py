"""The faults of the cluster fault runs (bench/cluster_faults.py and
tests/cluster/test_operations_never_forget.py), each injected, healed, and followed by a
bounded wait for a full ISR.

Kinds (``FAULT_KINDS``):

- ``leader_kill`` / ``leader_pause``: kill -9 (SIGSTOP) the leader of a data partition,
  wait until the others see it gone and for progress, restart (SIGCONT) it;
- ``coordinator_kill``: the same to the transaction coordinator of one of the run's
  transactional ids (the leader of its ``__transaction_state`` partition);

and the routine operations of issue 25 (``OPERATIONS``):

- ``wiped_restart``: kill -9 a follower of a data partition, empty its data directory (a
  replaced disk: oncelog writes ``meta.properties`` again, from the metadata store's
  cluster id, as on a new disk) or only that partition's directory (writes lost by a power
  failure), wait for progress, restart it and stall it (SIGSTOP) at once for a while, as a
  replica still catching up: the ISR must not count it before it has the records;
- ``rolling_restart``: every broker in turn (the controller last) stopped with SIGTERM
  (a controlled shutdown, exit code 0 expected), restarted, and a full ISR before the next;
- ``elect_after_restart``: stop (SIGTERM) a broker that is some data partition's
  preferred leader, restart it, and as soon as it is back in the ISR of every partition it
  prefers, a preferred leader election of every partition (confluent-kafka's
  ``elect_leaders``, as ``oncelog topics elect-leaders --election-type preferred``);
- ``etcd_pause``: SIGSTOP etcd for ``broker.session.timeout.ms`` plus a few seconds, so
  every lease is due when it resumes, then SIGCONT.

After each heal (every step of a rolling restart) every partition of every topic,
``__consumer_offsets`` and ``__transaction_state`` included, must have ISR == replicas and a
live leader in every running broker's Metadata (which the brokers take from etcd) within
``isr_bound`` seconds, and keep them for ``replica.lag.time.max.ms`` plus a second (a
follower that stopped fetching stays in the ISR that long); the time it took is recorded, a
bound exceeded is a problem of the fault. Once it is full, every ISR member's log (its
files) must reach the high watermark its leader answers: a replica counted in the ISR
without the records below the high watermark (a wiped broker let back in before it fetched
anything) is a problem too.
Problems (a bound exceeded, a replica in the ISR without the records, no progress, an
unclean exit after SIGTERM) are recorded and the run goes on, so that one run reports
everything it finds.
"""

from __future__ import annotations

import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import ElectionType, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from kio.schema.list_offsets.v7 import request as lo
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from oncelog.coordinator.transaction import transaction_log_partition
from oncelog.errors import ErrorCode
from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.harness.process import ServerStartError, ServerStopError
from oncelog.harness.rawkafka import request_once
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC
from tests.support.replicated import log_end

CRASHES = ("leader_kill", "leader_pause", "coordinator_kill")
OPERATIONS = ("wiped_restart", "rolling_restart", "elect_after_restart", "etcd_pause")
FAULT_KINDS = CRASHES + OPERATIONS
ETCD_PAUSE_PAST_SESSION_S = 3.0
SETTLE_PAST_LAG_S = 1.0
LATEST = -1  # ListOffsets timestamp: the end (the high watermark under read_uncommitted)
GONE_TIMEOUT_S = 60.0


@dataclass
class FaultRecord:
    """One injected fault: what was done to whom, when (seconds since the run started),
    the worst time from a heal to a full ISR among those within the bound, whether the
    bound was exceeded, and the problems found."""

    kind: str
    at_s: float
    target: str = ""
    detail: str = ""
    took_s: float = 0.0
    full_isr_s: float | None = None
    isr_bound_exceeded: bool = False
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        isr = ("not within the bound" if self.isr_bound_exceeded
               else f"after {self.full_isr_s:.1f}s" if self.full_isr_s is not None else "-")
        text = f"{self.at_s:7.1f}s {self.kind} {self.target}: {self.detail}; full ISR {isr}"
        return text + "".join(f"\n    PROBLEM {p}" for p in self.problems)


def isr_shortfall(view: MetadataView, brokers: int) -> list[str]:
    """What keeps ``view`` from a full cluster: a broker unregistered, a partition with
    no live leader or an ISR short of its replicas."""
    short = [] if len(view.brokers) == brokers else [f"brokers {sorted(view.brokers)}"]
    for topic, parts in sorted(view.topics.items()):
        for index, p in sorted(parts.items()):
            if p.leader not in view.brokers or set(p.isr) != set(p.replicas):
                short.append(f"{topic}-{index} leader {p.leader} replicas {list(p.replicas)} "
                             f"isr {list(p.isr)}")
    return short


def wait_full_isr(cluster: ClusterProcess, bound: float, settle: float = 0.0,
                  nodes: Sequence[int] | None = None) -> tuple[float | None, list[str]]:
    """Poll the Metadata of ``nodes`` (every running broker) until none has an
    ``isr_shortfall`` and that has held for ``settle`` seconds (a follower that stopped
    fetching leaves the ISR only after ``replica.lag.time.max.ms``): the seconds until the
    ISR was full for good, or None and the last shortfall after ``bound`` seconds."""
    started = time.monotonic()
    full_since: float | None = None
    while True:
        shortfall: list[str] = []
        for node in nodes if nodes is not None else cluster.running:
            try:
                view = cluster.metadata(node)
            except Exception as exc:  # a broker still starting, or going away
                shortfall = [f"broker {node}: {exc!r}"]
                break
            shortfall = [f"broker {node} says {s}" for s in isr_shortfall(view, cluster.count)]
            if shortfall:
                break
        now = time.monotonic()
        if shortfall:
            full_since = None
        else:
            full_since = now if full_since is None else full_since
            if now - full_since >= settle:
                return full_since - started, []
        if now - started > bound + settle:
            return None, shortfall or ["full, but not for long"]
        time.sleep(0.2)  # polling interval, not synchronisation


def high_watermarks(cluster: ClusterProcess, view: MetadataView,
                    nodes: Sequence[int]) -> dict[tuple[str, int], int]:
    """Each partition's high watermark as its leader (in ``view``, one of ``nodes``)
    answers ListOffsets (latest, read_uncommitted); the others are left out."""
    by_leader: dict[int, list[tuple[str, int]]] = {}
    for topic, parts in view.topics.items():
        for index, p in parts.items():
            if p.leader in nodes:
                by_leader.setdefault(p.leader, []).append((topic, index))
    found: dict[tuple[str, int], int] = {}
    for leader, partitions in by_leader.items():
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        request = lo.ListOffsetsRequest(
            replica_id=BrokerId(-1), isolation_level=i8(0), topics=tuple(
                lo.ListOffsetsTopic(name=TopicName(t), partitions=tuple(
                    lo.ListOffsetsPartition(partition_index=i32(i), timestamp=i64(LATEST))
                    for i in indexes)) for t, indexes in topics.items()))
        try:
            with cluster.reach():
                response = request_once(cluster.brokers[leader].bootstrap, request)
        except OSError:  # going away; its partitions are not judged this time
            continue
        for t in response.topics:
            for p in t.partitions:
                if p.error_code == ErrorCode.none:
                    found[str(t.name), int(p.partition_index)] = int(p.offset)
    return found


def isr_lacking(cluster: ClusterProcess, nodes: Sequence[int] | None = None) -> list[str]:
    """ISR members whose log (its files) ends below the high watermark their leader
    answered before: in the ISR without the records a consumer may read (DESIGN.md
    invariants 9 and 10). Asks ``nodes`` (every running broker; leave a paused one out).
    Kept only if still in the ISR in their Metadata read after the files, so a member
    that left the ISR meanwhile is not one."""
    nodes = list(nodes if nodes is not None else cluster.running)
    view = cluster.metadata(nodes[0])
    lacking = []
    for (topic, index), hw in sorted(high_watermarks(cluster, view, nodes).items()):
        for node in view.topics[topic][index].isr:
            if node not in cluster.brokers:
                continue
            end = log_end(cluster.brokers[node].data_dir, topic, index)
            if end < hw:
                lacking.append((topic, index, node, end, hw))
    if not lacking:
        return []
    views = [cluster.metadata(n) for n in nodes]
    return [f"broker {node} in the ISR of {topic}-{index} with its log ending at {end}, "
            f"below the high watermark {hw}" for topic, index, node, end, hw in lacking
            if all(node in v.topics[topic][index].isr for v in views)]


class FaultInjector:
    """Injects ``FAULT_KINDS`` into ``cluster``; victims chosen by ``rng`` among the
    leaders of ``topics`` (the data topics) and the coordinators of ``transactional_ids``.
    ``progress()`` waits for the workload to move on (AssertionError if it does not) and
    is called while a broker is down. ``say`` gets a line per fault."""

    def __init__(self, cluster: ClusterProcess, *, topics: Sequence[str], rng: random.Random,
                 progress: Callable[[], None] = lambda: None, isr_bound: float = 60.0,
                 transactional_ids: Sequence[str] = (), wipe_scope: str | None = None,
                 say: Callable[[str], None] = lambda line: None) -> None:
        self.cluster = cluster
        self.topics = list(topics)
        self.rng = rng
        self.progress = progress
        self.isr_bound = isr_bound
        self.transactional_ids = list(transactional_ids)
        self.wipe_scope = wipe_scope  # "disk", "partition", or None: alternate
        self.say = say
        configs = cluster.configs
        lag_s = int(configs.get("replica.lag.time.max.ms", 30000)) / 1000
        self.settle = lag_s + SETTLE_PAST_LAG_S
        self.session_s = int(configs.get("broker.session.timeout.ms", 9000)) / 1000
        self.stall = min(lag_s, self.session_s) * 0.75
        self.records: list[FaultRecord] = []
        self.started = time.monotonic()

    def inject(self, kind: str) -> FaultRecord:
        record = FaultRecord(kind, round(time.monotonic() - self.started, 1))
        getattr(self, "_" + kind)(record)
        record.took_s = round(time.monotonic() - self.started - record.at_s, 1)
        self.records.append(record)
        self.say(record.line())
        return record

    # -- steps ---------------------------------------------------------------------------------
    def _data_partition(self) -> tuple[str, int, int]:
        """A seeded data partition and its leader."""
        view = self.cluster.metadata()
        topic = self.rng.choice(self.topics)
        index = self.rng.randrange(len(view.topics[topic]))
        leader = view.topics[topic][index].leader
        if leader not in self.cluster.running:  # leaderless for now: any broker
            leader = self.rng.choice(self.cluster.running)
        return topic, index, leader

    def _wait_gone(self, victim: int, record: FaultRecord) -> None:
        other = next(n for n in self.cluster.running if n != victim)
        try:
            self.cluster.wait_until(lambda m: victim not in m.brokers,
                                    f"broker {victim} gone", timeout=GONE_TIMEOUT_S,
                                    node_id=other)
        except AssertionError:
            record.problems.append(f"broker {victim} still registered after "
                                   f"{GONE_TIMEOUT_S:.0f}s")

    def _progress(self, record: FaultRecord, when: str) -> None:
        try:
            self.progress()
        except AssertionError as exc:
            record.problems.append(f"no progress {when}: {str(exc).splitlines()[0]}")

    def _healed(self, record: FaultRecord, after: str) -> None:
        took, shortfall = wait_full_isr(self.cluster, self.isr_bound, self.settle)
        if took is None:
            record.isr_bound_exceeded = True
            record.problems.append(
                f"no full ISR within {self.isr_bound:.0f}s after {after}: "
                + "; ".join(shortfall[:12]) + (" ..." if len(shortfall) > 12 else ""))
        else:
            record.full_isr_s = round(max(took, record.full_isr_s or 0.0), 2)
            self._check_isr(record, f"after {after}")

    def _check_isr(self, record: FaultRecord, when: str,
                   nodes: Sequence[int] | None = None) -> None:
        try:
            lacking = isr_lacking(self.cluster, nodes)
        except (OSError, AssertionError, KeyError):  # a broker going away while asked
            return
        record.problems += [f"{when}: {line}" for line in lacking
                            if f"{when}: {line}" not in record.problems]

    def _restart(self, node: int, record: FaultRecord) -> None:
        """Start ``node`` again once the others see its registration gone; a start that
        fails (e.g. its old registration still alive) is a problem, retried once."""
        self._wait_gone(node, record)
        try:
            self.cluster.restart(node)
        except ServerStartError as exc:
            record.problems.append(f"broker {node} failed to start: "
                                   f"{str(exc).splitlines()[0]}")
            self._wait_gone(node, record)
            self.cluster.restart(node)

    def _stop(self, node: int, record: FaultRecord) -> None:
        """SIGTERM: a controlled shutdown, which must end with exit code 0."""
        try:
            code = self.cluster.brokers[node].stop(check=False)
        except ServerStopError:
            record.problems.append(f"broker {node} did not exit after SIGTERM (killed)")
            return
        if code != 0:
            record.problems.append(f"broker {node} exited with {code} after SIGTERM")

    # -- the kinds -----------------------------------------------------------------------------
    def _leader_kill(self, record: FaultRecord) -> None:
        topic, index, victim = self._data_partition()
        record.target, record.detail = f"broker {victim}", f"kill -9 of {topic}-{index}'s leader"
        self._crash(record, victim, pause=False)

    def _leader_pause(self, record: FaultRecord) -> None:
        topic, index, victim = self._data_partition()
        record.target = f"broker {victim}"
        record.detail = f"SIGSTOP of {topic}-{index}'s leader past its session"
        self._crash(record, victim, pause=True)

    def _coordinator_kill(self, record: FaultRecord) -> None:
        if not self.transactional_ids:
            self._leader_kill(record)
            return
        txn_id = self.rng.choice(self.transactional_ids)
        view = self.cluster.metadata()
        index = transaction_log_partition(txn_id, len(view.topics[TRANSACTION_STATE_TOPIC]))
        victim = view.topics[TRANSACTION_STATE_TOPIC][index].leader
        record.target = f"broker {victim}"
        record.detail = f"kill -9 of {txn_id}'s coordinator ({TRANSACTION_STATE_TOPIC}-{index})"
        self._crash(record, victim, pause=False)

    def _crash(self, record: FaultRecord, victim: int, *, pause: bool) -> None:
        if pause:
            self.cluster.pause(victim)
        else:
            self.cluster.kill(victim)
        self._wait_gone(victim, record)
        self._progress(record, f"with broker {victim} down")
        if pause:
            self.cluster.resume(victim)
        else:
            self._restart(victim, record)
        self._healed(record, "the restart" if not pause else "SIGCONT")

    def _wiped_restart(self, record: FaultRecord) -> None:
        topic, index, leader = self._data_partition()
        view = self.cluster.metadata()
        victim = self.rng.choice([n for n in view.topics[topic][index].replicas
                                  if n != leader and n in self.cluster.running])
        scope = self.wipe_scope or ("disk" if sum(
            1 for r in self.records if r.kind == "wiped_restart") % 2 == 0 else "partition")
        record.target = f"broker {victim}"
        self.cluster.kill(victim)
        data_dir = self.cluster.brokers[victim].data_dir
        if scope == "disk":
            wiped = f"data directory emptied (a replaced disk; {topic}-{index}'s follower)"
            for entry in list(data_dir.iterdir()):
                if entry.is_dir():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        else:
            wiped = f"{topic}-{index}'s directory removed (it followed its leader)"
            shutil.rmtree(data_dir / f"{topic}-{index}", ignore_errors=True)
        record.detail = (f"kill -9, {wiped}, restarted and stalled (SIGSTOP) at once for "
                         f"{self.stall:.1f}s, a replica still catching up")
        self._wait_gone(victim, record)
        self._progress(record, f"with broker {victim} down")
        self._restart(victim, record)
        self.cluster.pause(victim)
        try:
            others = [n for n in self.cluster.running if n != victim]
            until = time.monotonic() + self.stall
            while time.monotonic() < until:  # the ISR must not count it while it lacks data
                self._check_isr(record, f"broker {victim} stalled", others)
                time.sleep(0.2)  # polling interval, not synchronisation
        finally:
            self.cluster.resume(victim)
        self._healed(record, "the restart")

    def _rolling_restart(self, record: FaultRecord) -> None:
        controller = self.cluster.metadata().controller_id
        order = sorted(n for n in self.cluster.brokers if n != controller)
        order += [controller] if controller in self.cluster.brokers else []
        record.target = "brokers " + ", ".join(map(str, order))
        record.detail = "SIGTERM, restart and a full ISR, one broker after the other"
        for node in order:
            self._stop(node, record)
            self._restart(node, record)
            self._healed(record, f"broker {node}'s restart")

    def _elect_after_restart(self, record: FaultRecord) -> None:
        view = self.cluster.metadata()
        preferred = sorted({p.replicas[0] for t in self.topics for p in view.topics[t].values()})
        victim = self.rng.choice(preferred)
        mine = [(t, i) for t in self.topics for i, p in view.topics[t].items()
                if p.replicas[0] == victim]
        record.target = f"broker {victim}"
        self._stop(victim, record)
        self._wait_gone(victim, record)
        self._progress(record, f"with broker {victim} stopped")
        self._restart(victim, record)
        try:
            self.cluster.wait_until(
                lambda m: all(victim in m.topics[t][i].isr for t, i in mine),
                f"broker {victim} in the ISR of the partitions it prefers",
                timeout=self.isr_bound)
        except AssertionError:
            record.problems.append(f"broker {victim} not back in the ISR of the partitions it "
                                   f"prefers within {self.isr_bound:.0f}s")
        record.detail = "SIGTERM, restart, preferred election of every partition: " + (
            self._elect_preferred())
        self._healed(record, "the election")

    def _elect_preferred(self) -> str:
        with self.cluster.reach():
            admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap})
            try:
                # no timeout keywords: confluent-kafka 2.16's binding refuses every one
                results = admin.elect_leaders(ElectionType.PREFERRED, None).result(70)
            except KafkaException as exc:
                return f"failed: {exc}"
        moved = sorted(f"{tp.topic}-{tp.partition}" for tp, e in results.items() if e is None)
        failed = sorted(f"{tp.topic}-{tp.partition}: {e}" for tp, e in results.items()
                        if e is not None and _code(e) != KafkaError.ELECTION_NOT_NEEDED)
        return (f"{len(moved)} moved ({', '.join(moved)})"
                + (f", not elected: {'; '.join(failed)}" if failed else ""))

    def _etcd_pause(self, record: FaultRecord) -> None:
        session_ms = int(self.cluster.configs.get("broker.session.timeout.ms", 9000))
        hold = session_ms / 1000 + ETCD_PAUSE_PAST_SESSION_S
        record.target = "etcd"
        record.detail = (f"SIGSTOP for {hold:.1f}s (broker.session.timeout.ms {session_ms} + "
                         f"{ETCD_PAUSE_PAST_SESSION_S:.0f}s), SIGCONT")
        self.cluster.pause_etcd()
        try:
            time.sleep(hold)  # the fault's length, not synchronisation
        finally:
            self.cluster.resume_etcd()
        self._healed(record, "SIGCONT")


def _code(error: object) -> object:
    """A KafkaError's code, from a KafkaException or the error itself."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0],
                                                                       KafkaError):
        return error.args[0].code()
    return error.code() if isinstance(error, KafkaError) else None
