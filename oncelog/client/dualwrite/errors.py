"""The dual-write recipe's own errors, and the best-effort cleanup helper.

``DualWriteFencedError`` and ``DualWriteInDoubtError`` are what callers act on (stop; call
``recover()``); ``quietly`` runs a cleanup step whose failure must not hide the real error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


class DualWriteError(Exception):
    """Base of this module's own errors."""


class DualWriteFencedError(DualWriteError):
    """Another instance recovered the same transactional id: this writer must stop."""


class DualWriteInDoubtError(DualWriteError):
    """The outcome of a unit is decided but not yet carried out on the log (or could not be
    read back from the database). Nothing is lost: ``recover()`` settles it."""


def fenced(transactional_id: str, generation: int | None) -> DualWriteFencedError:
    """The error for a state-row write that found another generation."""
    return DualWriteFencedError(
        f"{transactional_id!r}: generation {generation} no longer owns the "
        "state row; another instance recovered it"
    )


def quietly(action: Callable[[], object], what: str) -> None:
    try:
        action()
    except Exception as exc:
        logger.debug("%s failed: %r", what, exc)
