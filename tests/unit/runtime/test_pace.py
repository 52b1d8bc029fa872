"""The pace file: when the source of a warm hand-off holds its next batch for its copy."""

from __future__ import annotations

import os
import time
from pathlib import Path

from spark_jobs.runtime import pace


def _log(offsets: Path, batch: int, at: float) -> None:
    offsets.mkdir(parents=True, exist_ok=True)
    entry = offsets / str(batch)
    entry.write_text("v1\n{}\n{}")
    os.utime(entry, (at, at))


def test_no_file_or_a_stale_file_never_holds(tmp_path: Path) -> None:
    offsets, path = tmp_path / "offsets", tmp_path / "pace" / "X.json"
    now = time.time()
    _log(offsets, 10, now)
    assert not pace.holds(str(path))
    pace.write(path, offsets, copy_at=2, valid_s=3.0)
    assert pace.holds(str(path), now=now + 0.5)
    # The copy stopped polling: past ``until`` the source plans as usual.
    assert not pace.holds(str(path), now=now + 3.5)


def test_holds_only_while_the_copy_is_behind_and_not_past_the_hold(tmp_path: Path) -> None:
    offsets, path = tmp_path / "offsets", tmp_path / "X.json"
    now = time.time()
    _log(offsets, 7, now - 5)
    _log(offsets, 8, now)
    pace.write(path, offsets, copy_at=5, hold_s=1.5)
    assert pace.holds(str(path), now=now + 1.0)  # three behind, logged 1 s ago
    assert not pace.holds(str(path), now=now + 1.6)  # never longer than the hold
    pace.write(path, offsets, copy_at=7, hold_s=1.5)
    assert not pace.holds(str(path), now=now + 0.1)  # one behind: plan as usual
    pace.clear(path)
    assert not pace.holds(str(path), now=now + 0.1)
