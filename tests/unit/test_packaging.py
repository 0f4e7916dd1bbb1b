"""What the package promises without a broker: its version, its typing marker, and a clear
message when the Spark extra is missing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import oncelog

REPO = Path(__file__).resolve().parents[2]


def test_version_is_the_distribution_version() -> None:
    from importlib.metadata import version

    assert oncelog.__version__ == version("oncelog")


def test_py_typed_ships_with_the_package() -> None:
    assert (Path(oncelog.__file__).parent / "py.typed").is_file()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert 'oncelog = ["py.typed"]' in pyproject


def test_import_oncelog_spark_without_pyspark_says_which_extra_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['pyspark'] = None  # as if PySpark were not installed\n"
        "try:\n"
        "    import oncelog.spark\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "else:\n"
        "    print('imported')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
        check=True,
    )
    assert "pip install 'oncelog[spark]'" in result.stdout, result.stdout
