"""Micro-benchmark of oncelog.storage.PartitionLog: append and read, no network.

    .venv/bin/python bench/storage_micro.py [--appends 200] [--dir /tmp]

Two shapes, each a 1 MiB-ish append buffer:
- ``big``: one batch of 1000 records of 1 KiB (what a batching producer sends);
- ``small``: 1000 batches of one 1 KiB record each (per-batch overhead: offsets,
  indexes, header walks).

For each it reports the time per ``append`` and per 1 MiB ``read`` at random offsets, next to
a bare ``os.pwrite``/``os.pread`` of the same size on the same disk, so the difference is
the Python overhead of the log. Data goes to the page cache (default flush policy).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from oncelog.clock import SystemClock
from oncelog.config import LogConfig
from oncelog.records.batch import LOG_OVERHEAD, BatchHeader, parse_header
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.storage.log import PartitionLog

MIB = 1 << 20


def build(shape: str) -> tuple[bytes, list[BatchHeader]]:
    value = b"v" * 1000
    now = time.time_ns() // 1_000_000
    if shape == "big":
        data = encode_batch([RecordInput(b"key-%04d" % i, value, (), now) for i in range(1000)])
    else:
        data = b"".join(
            encode_batch([RecordInput(b"key-%04d" % i, value, (), now)]) for i in range(1000)
        )
    headers = []
    pos = 0
    while pos < len(data):
        h = parse_header(data, pos)
        headers.append(h)
        pos += h.batch_length + LOG_OVERHEAD
    return data, headers


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - t0) / 1000)
    return out


def summary(name: str, samples: list[float], size: int) -> str:
    median = statistics.median(samples)
    p90 = sorted(samples)[int(len(samples) * 0.9)]
    return (
        f"  {name:<28} median {median:8.1f} us  p90 {p90:8.1f} us  "
        f"({size / median:7.0f} MB/s at the median)"
    )


def cpu_only_append(data: bytes, headers: list[BatchHeader], root: Path) -> list[float]:
    """Append timings with ``os.pwrite`` replaced by a no-op: the log's own Python work."""
    log = PartitionLog.open(root / "cpu-only-0", LogConfig(), SystemClock())
    real = os.pwrite
    os.pwrite = lambda fd, buf, offset: memoryview(buf).nbytes
    try:
        bufs = iter([bytearray(data) for _ in range(100)])
        return timed(lambda: log.append(next(bufs), headers), 100)
    finally:
        os.pwrite = real
        log.delete()


def run(shape: str, appends: int, root: Path) -> None:
    data, headers = build(shape)
    size = len(data)
    directory = root / f"bench-{shape}-0"
    log = PartitionLog.open(directory, LogConfig(segment_bytes=64 * MIB), SystemClock())
    try:
        bufs = [bytearray(data) for _ in range(appends)]  # append rewrites its buffer
        it = iter(bufs)
        append_us = timed(lambda: log.append(next(it), headers), appends)
        end = log.log_end_offset
        rng = random.Random(1)
        read_us = timed(lambda: log.read(rng.randrange(end), MIB), appends)
        sample = log.read(rng.randrange(end), MIB)
        assert len(sample.data) >= min(size, MIB) - 1100, len(sample.data)

        raw_path = root / f"raw-{shape}.bin"
        fd = os.open(raw_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            positions = iter(range(0, appends * size, size))
            pwrite_us = timed(lambda: os.pwrite(fd, data, next(positions)), appends)
            pread_us = timed(
                lambda: os.pread(fd, MIB, rng.randrange(0, (appends - 1) * size)), appends
            )
        finally:
            os.close(fd)
            raw_path.unlink()
        print(f"{shape}: {len(headers)} batch(es), {size} bytes per append, "
              f"{log.log_end_offset} records in {len(log.segment_base_offsets())} segments")
        print(summary("PartitionLog.append", append_us, size))
        print(summary("os.pwrite (same bytes)", pwrite_us, size))
        print(summary("PartitionLog.read(1 MiB)", read_us, MIB))
        print(summary("os.pread(1 MiB)", pread_us, MIB))
        print(summary("append, pwrite stubbed out", cpu_only_append(data, headers, root),
                      size))
        overhead_w = statistics.median(append_us) - statistics.median(pwrite_us)
        overhead_r = statistics.median(read_us) - statistics.median(pread_us)
        print(f"  python overhead at the median: append {overhead_w:.1f} us, "
              f"read {overhead_r:.1f} us")
    finally:
        log.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="storage-micro-", dir=args.dir))
    try:
        for shape in ("big", "small"):
            run(shape, args.appends, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
