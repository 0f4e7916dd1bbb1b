"""oncelog: a Kafka-compatible streaming log built for exactly-once.

``oncelog.__version__`` is the installed distribution's version (``pyproject.toml`` is its
single source); a source tree that was never installed reports ``0+unknown``.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("oncelog")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
