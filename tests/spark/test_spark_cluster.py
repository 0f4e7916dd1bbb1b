"""The payments pipeline on Spark against a 3-broker cluster (etcd + three ``oncelog serve``),
with a broker killed during the run: the output is still exactly once.

Every topic has replication factor 3 (the payments topics by ``default.replication.factor``,
the internal ones by their own factors) and ``min.insync.replicas`` 2, so one broker down
leaves every partition writable with acks=all. The broker killed is chosen, not guessed: the
leader of the ``__transaction_state`` partition that holds the sink's transactional id of
Spark partition 0 of the ``balances`` query, at the moment every task of micro-batch 1 has
*prepared* its transaction (KIP-939) and the driver has not completed any of them (the
connector's ``commit.start`` hold point). That is the hardest moment for the sink: its
prepared transactions are in doubt and their coordinator disappears; the new leader of that
partition must load them, keep them prepared (never time them out) and let the driver
complete them. The broker is started again while the pipeline goes on.

The queries' ids (which decide where their transactional ids and progress groups are
coordinated) are chosen before Spark starts, by writing each checkpoint's ``metadata`` file
as Spark would: the ``balances`` query's progress group is coordinated by the same broker,
so the group coordinator moves too (the progress the tasks commit inside their transactions,
and the driver's progress reads, go to the new leader of its ``__consumer_offsets``
partition)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from examples.payments.verify import verify
from oncelog.broker.cluster_view import coordinator_partition
from oncelog.harness.broker import ConfigValue
from oncelog.harness.cluster import ClusterProcess, MetadataView
from oncelog.harness.etcd import EtcdProcess
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from oncelog.spark.progress import progress_group, transactional_id
from tests.support.spark_pipeline import EVENTS, Pipeline, expect_done, tail

TXN_PARTITIONS = 3
CLUSTER_CONFIGS: dict[str, ConfigValue] = {
    "transaction.two.phase.commit.enable": True,
    "group.initial.rebalance.delay.ms": 0,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "offsets.topic.num.partitions": TXN_PARTITIONS,
    # Spark's JVM and Python workers load both cores: a 2 s lease (the cluster fixtures'
    # default) lapsed under that load, and a broker whose lease lapses stays out.
    "broker.session.timeout.ms": 6000,
}
HOLD_POINT = "commit.start@1"


@pytest.fixture
def cluster(tmp_path: Path, etcd: EtcdProcess) -> Iterator[ClusterProcess]:
    cluster = ClusterProcess(tmp_path / "cluster", brokers=3, configs=CLUSTER_CONFIGS, etcd=etcd)
    try:
        yield cluster.start()
    finally:
        cluster.close()


def fully_replicated(*topics: str) -> Callable[[MetadataView], bool]:
    def check(m: MetadataView) -> bool:
        return all(
            m.topics.get(t) and all(p.leader > 0 and len(p.isr) == 3 for p in m.topics[t].values())
            for t in topics
        )

    return check


def coordinators(m: MetadataView, query: str, query_id: str) -> tuple[int, int]:
    """(leader coordinating the query's Spark partition 0, leader of its progress group)."""
    prefix = f"payments-{query}"
    txn = coordinator_partition(TXN_PARTITIONS, transactional_id(prefix, query_id, 0))
    group = coordinator_partition(TXN_PARTITIONS, progress_group(prefix, query_id))
    return m.topics[TRANSACTION_STATE_TOPIC][txn].leader, m.topics[OFFSETS_TOPIC][group].leader


def choose_query_ids(m: MetadataView, checkpoint: Path) -> tuple[str, int]:
    """Query ids for both queries (written to their checkpoints), balances' such that one
    broker, the victim, coordinates its Spark partition 0 and its progress group."""
    ids = (str(uuid.uuid5(uuid.NAMESPACE_OID, f"sparkcluster-{i}")) for i in range(1000))
    balances = next(q for q in ids if len(set(coordinators(m, "balances", q))) == 1)
    minutes = next(ids)
    for name, query_id in (("balances", balances), ("minutes", minutes)):
        (checkpoint / name).mkdir(parents=True)
        (checkpoint / name / "metadata").write_text(f'{{"id":"{query_id}"}}\n')
    return balances, coordinators(m, "balances", balances)[0]


def wait_for_file(path: Path, driver: subprocess.Popen[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert driver.poll() is None, f"the driver ended ({driver.returncode}) before {path}"
        assert time.monotonic() < deadline, f"no {path} within {timeout:.0f} s"
        time.sleep(0.2)  # polling the driver's file, not synchronisation by a guessed time


# Three brokers, etcd and two pipeline runs: a longer hang guard than the suite's 300 s,
# which a slow or busy machine exceeds without anything being stuck.
@pytest.mark.timeout(900)
def test_pipeline_exactly_once_with_the_sinks_coordinator_killed(
    cluster: ClusterProcess, tmp_path: Path
) -> None:
    pipeline = Pipeline.create(cluster.bootstrap, tmp_path)
    cluster.wait_until(
        fully_replicated(pipeline.input, pipeline.balances, pipeline.minutes,
                         TRANSACTION_STATE_TOPIC, "__consumer_offsets"),
        "every partition with three replicas in sync",
    )  # fmt: skip
    balances_id, victim = choose_query_ids(cluster.metadata(), pipeline.checkpoint)
    hold = tmp_path / "hold"
    hold.mkdir()
    driver = pipeline.start(
        env={"ONCELOG_SPARK_HOLD_AT": HOLD_POINT, "ONCELOG_SPARK_HOLD_DIR": str(hold)}
    )
    try:
        wait_for_file(hold / "held-commit.start-1", driver, timeout=240)
    except AssertionError:
        raise AssertionError(tail(pipeline.finish(driver, timeout=1))) from None
    # Every task of batch 1 prepared; the driver completes nothing until released.
    txn_id = transactional_id("payments-balances", balances_id, 0)
    assert txn_id in pipeline.open_transactions(), "batch 1 of partition 0 is not in doubt"
    assert coordinators(cluster.metadata(), "balances", balances_id) == (victim, victim)

    cluster.kill(victim)
    cluster.wait_until(
        lambda m: (
            victim not in m.brokers
            and all(
                leader not in (victim, -1) for leader in coordinators(m, "balances", balances_id)
            )
        ),
        f"the coordinators of {txn_id} and its progress moved from broker {victim}",
    )
    (hold / "release-commit.start-1").touch()
    cluster.restart(victim)

    run = pipeline.finish(driver)
    expect_done(run)
    cluster.wait_until(lambda m: victim in m.brokers, f"broker {victim} back")
    assert pipeline.open_transactions() == []
    report = verify(pipeline.bootstrap, pipeline.input, pipeline.balances, pipeline.minutes)
    assert report.ok, str(report)
    assert report.input_events == EVENTS and report.balance_records == EVENTS
    assert report.minute_records > 3
