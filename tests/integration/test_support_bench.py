"""The benchmark harness: scenario registry, profile summary, report table (pure), and the
transactional workers against a real broker."""

from __future__ import annotations

import xml.dom.minidom
from collections import Counter
from pathlib import Path

import pytest

from bench import profiles
from bench.report import median_phase, problems, rate, ratio_pairs, results_table
from bench.run import create_topic, run_worker
from bench.scenarios import BASE_PRODUCER, SCENARIOS, Scenario, select
from tests.conftest import BrokerFactory


def test_default_scenarios_are_the_four_throughput_runs() -> None:
    names = [s.name for s in select(None)]
    assert names == ["100B-x1M-1p", "100B-x1M-4p", "1KiB-x200k-1p", "1KiB-x200k-4p"]
    assert {s.name for s in select("all")} == set(SCENARIOS)
    assert [s.name for s in select("1KiB-x200k-4p,100B-x1M-1p")] == [
        "1KiB-x200k-4p",
        "100B-x1M-1p",
    ]
    with pytest.raises(SystemExit):
        select("nope")


def test_scenario_configs_and_scaling() -> None:
    s = SCENARIOS["100B-x1M-4p-idempotent"]
    assert s.producer_config()["enable.idempotence"] is True
    assert s.producer_config()["batch.size"] == 1048576 == BASE_PRODUCER["batch.size"]
    assert SCENARIOS["100B-x1M-1p"].scaled_records(0.1) == 100_000
    assert SCENARIOS["100B-x1M-1p"].scaled_records(0.0) == 1000


def test_summarise_folded_stacks(tmp_path: Path) -> None:
    folded = tmp_path / "p.folded"
    folded.write_text("main (a.py:1);loop (a.py:5) 6\nmain (a.py:1);loop (a.py:5);io (b.py:2) 4\n")
    stacks = profiles.read_folded([folded])
    rows = profiles.summarise(stacks)
    assert [(r.function, r.self_share, r.total_share) for r in rows] == [
        ("loop (a.py:5)", 0.6, 1.0),
        ("io (b.py:2)", 0.4, 0.4),
    ]
    svg = profiles.flamegraph_svg(stacks, "t <&>")
    xml.dom.minidom.parseString(svg)
    assert svg.count("<rect") == 3
    assert "| `loop (a.py:5)` | 60.0% | 100.0% |" in profiles.markdown(rows, "h")
    assert profiles.summarise(Counter()) == []


def _outcome(
    broker: str, produce_s: float, consume_errors: int = 0, cpu_s: float | None = None
) -> dict[str, object]:
    produce: dict[str, object] = {
        "records": 1000, "bytes": 100_000, "seconds": produce_s, "errors": 0
    }
    if cpu_s is not None:
        produce["broker_cpu_s"] = cpu_s
    return {
        "broker": broker,
        "scenario": "x",
        "records": 1000,
        "produce": produce,
        "consume": {"records": 1000, "bytes": 100_000, "seconds": 0.5, "errors": consume_errors,
                    "join_seconds": 3.0},
    }


def test_rate_median_and_table() -> None:
    assert rate({"records": 1000, "bytes": 10**6, "seconds": 2.0, "errors": 0}) == (500.0, 0.5)
    assert rate({"records": 1000, "bytes": 10**6, "seconds": 2.0, "errors": 1}) is None
    runs = [_outcome("oncelog", s) for s in (1.0, 4.0, 2.0)]
    chosen = median_phase(runs, "produce")
    assert chosen is not None and chosen["seconds"] == 2.0
    scenario = Scenario("x", 1000, 100, 1)
    outcomes = [
        _outcome("oncelog", 2.0, consume_errors=1, cpu_s=0.05), _outcome("tansu", 1.0)
    ]
    table = results_table(outcomes, ["oncelog", "tansu"], [scenario])
    # Broker CPU per MB: 0.05 s over 0.1 MB is 500 ms/MB; Tansu's run measured none.
    assert "| x | 1,000 | produce | 500 | 0.1 | 500.00 | 1,000 | 0.1 | — | 0.50 |" in table
    assert "| x | 1,000 | consume | failed | — | — | 2,000 | 0.2 | — | — |" in table


def test_cluster_runs_compare_with_their_own_size_and_skip_what_does_not_fit() -> None:
    assert ratio_pairs(["oncelog", "tansu"]) == [("oncelog", "tansu")]
    assert ratio_pairs(["oncelog", "oncelog-cluster3", "kafka-cluster3"]) == [
        ("oncelog-cluster3", "kafka-cluster3")
    ]
    rf3 = Scenario("x", 1000, 100, 1, replication_factor=3, consume=False)
    clustered = _outcome("oncelog-cluster3", 2.0, cpu_s=0.05)
    del clustered["consume"]
    outcomes = [
        {"broker": "oncelog", "scenario": "x", "records": 1000, "skipped": "rf 3 on 1"},
        clustered,
        _outcome("kafka-cluster3", 1.0),
    ]
    table = results_table(outcomes, ["oncelog", "oncelog-cluster3", "kafka-cluster3"], [rf3])
    assert "| oncelog-3/Kafka-3 |" in table
    assert "| x | 1,000 | produce | n/a | — | — | 500 | 0.1 | 500.00 | 1,000 | 0.1 | — | 0.50 |" \
        in table
    assert "consume" not in table and "join" not in table
    assert problems(outcomes) == []


@pytest.mark.integration
def test_issue18_workloads_against_a_real_broker(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    """The transactional phases of bench/txn_workload.py, each in its own worker process as
    bench/run.py runs them, against ``oncelog serve``: producers in threads, 2PC through
    oncelog.client, and consume-transform-produce with read_committed input."""
    broker = broker_factory(configs={"transaction.two.phase.commit.enable": True})
    out = tmp_path / "bench-workers.log"
    create_topic(broker.bootstrap, "rate", 2)
    threads = SCENARIOS["txn-rate-10x100B-32p-32producers"]
    base = {"bootstrap": broker.bootstrap, "topic": "rate", "records": 3, "record_size": 100,
            "timeout": 60.0, "phase": "txn-rate", "txns": 5}
    two = run_worker({**base, "config": threads.producer_config(), "partitions": [0, 1]}, out)
    assert (two["errors"], two["producers"], two["txns"], two["records"]) == (0, 2, 10, 30)
    assert len(two["latencies_ms"]) == 10 and two["ended_at"] > two["started_at"]
    two_pc = SCENARIOS["2pc-rate-10x100B-1p"]
    prepared = run_worker({**base, "config": two_pc.producer_config(), "partitions": [1],
                           "client": "oncelog", "two_phase": True}, out)
    assert prepared["errors"] == 0 and len(prepared["prepare_ms"]) == 5
    ctp = SCENARIOS["ctp-100B-x50k-4p-commit100"]
    create_topic(broker.bootstrap, "in", 2)
    create_topic(broker.bootstrap, "in-out", 2)
    filled = run_worker({**base, "phase": "produce", "topic": "in", "records": 250,
                         "config": ctp.producer_config(), "txn_records": 100}, out)
    assert filled["errors"] == 0
    done = run_worker({**base, "phase": "ctp", "topic": "in", "output_topic": "in-out",
                       "records": 250, "commit_every": 100, "config": ctp.producer_config(),
                       "consumer": {**ctp.consumer_config(), "isolation.level":
                                    "read_committed"}}, out)
    # 250 input records: commits after 100, 200 and the last 50.
    assert (done["errors"], done["records"], done["txns"]) == (0, 250, 3), done
    read = run_worker({**base, "phase": "consume", "topic": "in-out", "records": 250,
                       "config": {**ctp.consumer_config(), "isolation.level": "read_committed"}},
                      out)
    assert (read["errors"], read["records"], read["bytes"]) == (0, 250, 25_000)
