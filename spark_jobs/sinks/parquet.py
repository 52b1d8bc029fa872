"""A task's output as a directory of Parquet files, one per written range of buckets.

``part-<first>-<last>.parquet`` holds the stable rows of buckets ``first``..``last`` (numbers
of the log's buckets, zero-padded so the names sort in bucket order). Each file is written under
a hidden temp name (``.part-...tmp-<random>``, in the same directory) and renamed into place,
so a reader never sees half a file: ``pd.read_parquet(dir)`` and pyarrow skip names starting
with a dot, ``duckdb.sql("select * from 'dir/*.parquet'")`` matches no ``.tmp`` name.

Exactly once: a range written again (a writer restarted from an older progress file) is the
same range under the same name, replaced whole by the rename with the same rows (final buckets
never change, the log holds each batch once). ``plan`` keeps a rewrite on the ranges already on
disk: it starts a range where a file starts, skips buckets a file already covers and ends a
range before the next file, so two files never overlap. A range with no row writes no file.

Columns: the output's own, ``stime`` kept (UTC timestamps), internal ones (``kind``) dropped.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pyarrow.parquet as pq

from spark_jobs.sinks.writer import Chunk

_PART = re.compile(r"^part-(-?\d+)-(-?\d+)\.parquet$")
DIGITS = 12


def part_name(first: int, last: int) -> str:
    return f"part-{first:0{DIGITS}d}-{last:0{DIGITS}d}.parquet"


class ParquetSink:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._cleanup()

    def _cleanup(self) -> None:
        # Temp files of a writer that died between writing and renaming: never read, never
        # renamed now (the range is written again from the log).
        for stale in self.directory.glob(".part-*.tmp-*"):
            stale.unlink(missing_ok=True)

    def ranges(self) -> list[tuple[int, int]]:
        """The (first, last) bucket ranges on disk, in order."""
        found = []
        for entry in os.listdir(self.directory):
            match = _PART.match(entry)
            if match:
                found.append((int(match.group(1)), int(match.group(2))))
        return sorted(found)

    def plan(self, lo: int, hi: int) -> tuple[int, int]:
        for first, last in self.ranges():
            if first < lo <= last:
                lo = last + 1  # already on disk in a range that began earlier
            elif first == lo:
                # The same range again: replace that file, whatever range the caller asked.
                return lo, last + 1
            elif lo < first < hi:
                hi = first  # never overlap the next file
        return lo, max(lo, hi)

    def write(self, chunk: Chunk) -> None:
        final = self.directory / part_name(chunk.first, chunk.last)
        scratch = self.directory / f".{final.name}.tmp-{uuid.uuid4().hex[:8]}"
        try:
            pq.write_table(chunk.table, scratch)
            with open(scratch, "rb") as written:
                os.fsync(written.fileno())
            os.replace(scratch, final)
        finally:
            scratch.unlink(missing_ok=True)
        descriptor = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(descriptor)  # the rename itself survives a crash of the machine
        finally:
            os.close(descriptor)

    def close(self) -> None:
        return None
