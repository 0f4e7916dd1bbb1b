"""``python -m oncelog``: the same as the ``oncelog`` command."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    from oncelog.program import as_program

    as_program()

from oncelog.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
