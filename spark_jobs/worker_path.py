"""Spark's Python processes import the installed pyspark (with its bytecode), not pyspark.zip.

Spark starts its Python processes (the streaming source runner of every Python data source query,
the planner runners, the worker daemons) with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's
zip first on PYTHONPATH. Python compiles what it imports from a zip every time (zipimport keeps no
bytecode cache): measured here, importing the streaming source runner cost 2.0 s of CPU from the
zips against 0.7 s from the installed package, and at CI load (15-20 on two cores) a runner then
missed the JVM's fixed 10 s to connect back ("Timed out while waiting for the Python worker to
connect back", CANNOT_OPEN_SOCKET): a DPC copy's redo died that way fourteen times in a row.

The zips hold the very package pip installed beside them (both ship in the pyspark wheel), so a
``.pth`` hook in the environment's site-packages drops them from ``sys.path`` at start-up: the
same code, imported with its bytecode. ``make venv`` installs the hook; on a host set up without
make, run ``python -m spark_jobs.worker_path`` once in the environment the agent runs in.
"""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

HOOK_NAME = "fedload-spark-bytecode.pth"
# Set (to anything) in a process's environment, the zips stay: the benchmark's baseline, and a
# way out should an installed pyspark ever differ from the zip Spark ships.
KEEP_ZIPS = "FEDLOAD_KEEP_SPARK_ZIPS"
# One line: a .pth runs lines that start with "import" at every interpreter start-up.
HOOK_LINE = (
    f"import os, sys; sys.path[:] = sys.path if os.environ.get('{KEEP_ZIPS}') else "
    "[p for p in sys.path "
    "if not (p.endswith('pyspark.zip') or ('py4j-' in p and p.endswith('-src.zip')))]\n"
)


def hook_path() -> Path:
    return Path(sysconfig.get_paths()["purelib"]) / HOOK_NAME


def install() -> Path:
    """Write the hook into this interpreter's site-packages (again: the same file)."""
    path = hook_path()
    path.write_text(HOOK_LINE)
    return path


def installed() -> bool:
    path = hook_path()
    return path.exists() and path.read_text() == HOOK_LINE


if __name__ == "__main__":
    print(f"installed {install()}", file=sys.stderr)
