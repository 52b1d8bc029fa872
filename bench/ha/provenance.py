"""What every Spark HA benchmark records beside its figures: the commit, the machine and its load
before and after (these machines are shared, so a figure without its load says little)."""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Sequence


def commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() or "unknown"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}"


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def provenance(command: str, load_before: Sequence[float]) -> dict[str, object]:
    return {
        "command": command,
        "commit": commit(),
        "machine": machine(),
        "load_average_before": list(load_before),
        "load_average_after": load_average(),
    }


def seconds(ms: float | None) -> str:
    """A table cell: milliseconds shown in seconds, '-' where nothing was measured."""
    return "-" if ms is None else f"{ms / 1000:.2f} s"
