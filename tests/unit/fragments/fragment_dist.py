"""A tiny installed distribution for the Python-fragment tests, without pip.

``importlib.metadata`` finds a distribution by a ``<name>-<version>.dist-info`` directory with
a METADATA file on ``sys.path``; its module beside it is importable from the same entry. So a
temporary directory put on the path is an installed distribution for the test's process.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

NAME = "fedload-test-fragments"
MODULE = "fedload_test_fragments"
VERSION = "1.2.0"

SOURCE = '''
from pyspark.sql import functions as F


def hot_readings(readings, *, above=20.0):
    """Readings above a temperature, passed through (stime is the input's event time)."""
    return readings.where(F.col("temp") > above).select("station", "ts", "temp")


def per_station(readings, *, window_seconds=4):
    """Average temperature per station and window."""
    return readings.groupBy(F.window("ts", f"{window_seconds} seconds"), "station").agg(
        F.avg("temp").alias("avg_temp")
    )
'''


def install(directory: Path, *, version: str = VERSION) -> Path:
    """Write the distribution into ``directory`` and put it on ``sys.path``; returns it."""
    package = directory / MODULE
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(SOURCE))
    info = directory / f"{MODULE}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {version}\n")
    (info / "top_level.txt").write_text(f"{MODULE}\n")
    (info / "entry_points.txt").write_text(
        f"[fedload.fragments]\nhot_readings = {MODULE}:hot_readings\n"
    )
    sys.path.insert(0, str(directory))
    return directory


def uninstall(directory: Path) -> None:
    if str(directory) in sys.path:
        sys.path.remove(str(directory))
    sys.modules.pop(MODULE, None)
