"""Unique names, so tests sharing one broker never see each other's topics or groups."""

from __future__ import annotations

import itertools
import os
import uuid

_counter = itertools.count()


def unique_name(prefix: str) -> str:
    """``prefix-<pid>-<n>-<random>``: unique within and across test processes."""
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:8]}"


def unique_topic(prefix: str = "topic") -> str:
    return unique_name(prefix)


def unique_group(prefix: str = "group") -> str:
    return unique_name(prefix)
