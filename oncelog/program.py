"""What a process started as a program (``python -m oncelog``, ``python -m
oncelog.cli.main``, a verify worker) does before its other imports."""

from __future__ import annotations

import sys


def as_program() -> None:
    """kio registers hypothesis strategies for its types at import whenever hypothesis is
    importable — about half a second of CPU per process in a test environment, for nothing
    a program uses — so hypothesis is made unimportable. Call it only in a ``__main__``
    block: a module imported by tests must leave hypothesis alone."""
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
