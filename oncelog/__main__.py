"""``python -m oncelog``: the same as the ``oncelog`` command."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    # As in oncelog.cli.main: a program never needs kio's hypothesis strategies.
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]

from oncelog.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
