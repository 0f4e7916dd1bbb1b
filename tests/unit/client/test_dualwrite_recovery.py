"""The dual-write recipe's identity decisions (``oncelog.client.dualwrite.recovery``), no I/O."""

from __future__ import annotations

import pytest

from oncelog.client.dualwrite.recovery import identity_reused, recovery_action
from oncelog.client.types import PreparedTxnState

STORED = PreparedTxnState(producer_id=1000, epoch=3)


@pytest.mark.parametrize(
    ("stored", "ongoing", "action"),
    [
        (STORED, None, "none"),
        (STORED, PreparedTxnState(producer_id=1000, epoch=3), "committed"),
        (STORED, PreparedTxnState(producer_id=1000, epoch=4), "aborted"),
        (STORED, PreparedTxnState(producer_id=1001, epoch=3), "aborted"),
        (PreparedTxnState(), PreparedTxnState(producer_id=1000, epoch=3), "aborted"),
    ],
)
def test_recovery_action_commits_only_the_recorded_transaction(
    stored: PreparedTxnState, ongoing: PreparedTxnState | None, action: str
) -> None:
    assert recovery_action(stored, ongoing) == action


def test_identity_reused_only_with_the_same_producer_id_and_epoch() -> None:
    assert identity_reused(1000, 3, STORED)
    assert not identity_reused(1000, 4, STORED)  # KIP-890 epoch bump: nothing to clear
    assert not identity_reused(1001, 3, STORED)
