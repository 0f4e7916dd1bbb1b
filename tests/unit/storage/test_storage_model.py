"""Random operation sequences against a simple model of the log (hypothesis)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.storage.log import PartitionLog
from tests.unit.storage.log_helpers import append, batch, batch_ranges, crash_copy, open_log

CONFIG: dict[str, Any] = {"segment_bytes": 700, "index_interval_bytes": 120}

ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.tuples(st.integers(1, 4), st.integers(0, 90)),
                                              min_size=1, max_size=3)),
        st.tuples(st.just("restart"), st.booleans()),
        st.tuples(st.just("truncate"), st.integers(0, 100)),
        st.tuples(st.just("delete_before"), st.integers(0, 100)),
    ),
    max_size=12,
)


def check(log: PartitionLog, model: list[tuple[int, int]], start: int) -> None:
    end = model[-1][1] + 1 if model else log.log_end_offset
    assert log.log_end_offset == end
    assert log.log_start_offset == start
    visible = [r for r in model if r[1] >= start]
    if visible:
        assert batch_ranges(log.read(start, 1 << 30).data) == visible
    for first, last in visible:
        for offset in {max(first, start), last}:
            result = log.read(offset, 1, max_offset=last + 1)
            assert batch_ranges(result.data) == [(first, last)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_random_operations_match_the_model(operations: list[tuple[str, Any]]) -> None:
    root = Path(tempfile.mkdtemp())
    try:
        directory = root / "t-0"
        log = open_log(directory, **CONFIG)
        model: list[tuple[int, int]] = []
        start = 0
        for step, (op, arg) in enumerate(operations):
            if op == "append":
                result = append(log, *(batch(n, value_size=v) for n, v in arg))
                model.extend((h.base_offset, h.last_offset) for h in result.headers)
            elif op == "restart":
                if arg:
                    log.close()
                else:
                    crashed = crash_copy(log, root / f"crash-{step}")
                    log.close()
                    shutil.rmtree(directory)
                    crashed.rename(directory)
                log = open_log(directory, **CONFIG)
            elif op == "truncate":
                boundaries = [b for b, _l in model]
                if boundaries:
                    target = boundaries[int(arg) % len(boundaries)]
                    log.truncate_to(target)
                    model = [r for r in model if r[0] < target]
                    start = min(start, target)  # the log start never exceeds the end
            else:
                end = model[-1][1] + 1 if model else log.log_end_offset
                target = min(int(arg), end)
                start = max(start, target)
                assert log.delete_records_before(target) == start
            check(log, model, start)
        log.close()
    finally:
        shutil.rmtree(root)
