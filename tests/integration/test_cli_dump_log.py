"""``oncelog dump-log`` on the files of a partition written by a real broker (stopped
cleanly first): batches with producer ids, sequences and transactional flags, the COMMIT and
ABORT markers, records with --print-data-log, the indexes and the producer snapshot, and
--verify failing on a damaged copy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from oncelog.client import Admin, Producer
from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_name, unique_topic


def dump(*args: str | Path) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "oncelog", "dump-log", *map(str, args)],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
                            check=False)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_dump_log_shows_batches_markers_records_and_verifies_crcs(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    topic = unique_topic("dump")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topic(topic, 1)
    with Producer({"bootstrap.servers": broker.bootstrap,
                   "transactional.id": unique_name("dump")}) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept", key=b"k1", partition=0, headers=[("h", b"v")])
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"dropped", key=b"k2", partition=0)
        producer.flush()
        producer.abort_transaction()
        producer_id = producer.producer_id
    broker.stop()
    directory = next(p for p in broker.data_dir.rglob(f"{topic}-0") if p.is_dir())
    log_file = directory / "00000000000000000000.log"

    result = dump(log_file, "--print-data-log", "--verify")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"Dumping {log_file}"
    batches = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batches) == 4
    assert all("isvalid: true" in b for b in batches)
    assert all(f"producerId: {producer_id} " in b for b in batches)
    data, commit, aborted, abort = batches
    assert "baseOffset: 3 lastOffset: 3" in abort and "isControl: true" in abort
    assert "baseOffset: 0 lastOffset: 0 count: 1 baseSequence: 0" in data
    assert "isTransactional: true isControl: false" in data
    assert "isTransactional: true isControl: true" in commit
    # Transactions v2 (the broker's default): each transaction has its own epoch, so the second
    # one starts again at sequence 0 one epoch up.
    assert "baseOffset: 2 lastOffset: 2 count: 1 baseSequence: 0" in aborted
    assert "producerEpoch: 0 " in data and "producerEpoch: 1 " in aborted
    assert "| offset: 0 CreateTime: " in result.stdout
    assert re.search(r"\| offset: 0 CreateTime: \d+ key: k1 payload: kept headers: h:v",
                     result.stdout)
    assert re.search(r"\| offset: 1 CreateTime: \d+ endTxnMarker: COMMIT coordinatorEpoch: \d+",
                     result.stdout)
    assert re.search(r"\| offset: 3 CreateTime: \d+ endTxnMarker: ABORT coordinatorEpoch: \d+",
                     result.stdout)
    # Without --print-data-log the markers are still decoded, the records are not.
    brief = dump(log_file).stdout
    assert "payload:" not in brief and "endTxnMarker: ABORT" in brief

    # The other files of the partition.
    txnindex = dump(directory / "00000000000000000000.txnindex")
    assert txnindex.returncode == 0
    assert f"producerId: {producer_id} firstOffset: 2 lastOffset: 3" in txnindex.stdout
    index = dump(directory / "00000000000000000000.index")
    assert index.returncode == 0 and index.stdout.startswith("Dumping ")
    snapshots = sorted(directory.glob("*.snapshot"))
    if snapshots:  # a clean stop writes one at the log end
        snap = dump(snapshots[-1])
        assert snap.returncode == 0
        assert f"producerId: {producer_id} " in snap.stdout
        assert "currentTxnFirstOffset: -1" in snap.stdout

    # A damaged copy: one flipped byte in the first batch's records.
    damaged = tmp_path / "00000000000000000000.log"
    raw = bytearray(log_file.read_bytes())
    raw[70] ^= 0xFF
    damaged.write_bytes(bytes(raw))
    bad = dump(damaged, "--verify")
    assert bad.returncode == 1
    assert "isvalid: false" in bad.stdout.splitlines()[1]
    assert "1 bad batches" in bad.stderr
    assert dump(damaged).returncode == 0  # without --verify it only reports

    unknown = dump(tmp_path / "nothing.txt")
    assert unknown.returncode == 1 and "cannot read" in unknown.stderr
