"""Checkpoint directories shaped like Spark's, for tests of what ships them (no Spark needed)."""

from __future__ import annotations

from pathlib import Path


def spark_like(root: Path, batches: int) -> None:
    """A directory shaped like a streaming checkpoint after ``batches`` micro-batches."""
    (root / "sources" / "0").mkdir(parents=True, exist_ok=True)  # left empty, as Spark may
    (root / "metadata").write_text('{"id":"q"}')
    for name in ("commits", "offsets", "state/0/0"):
        (root / name).mkdir(parents=True, exist_ok=True)
    for batch in range(batches):
        (root / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"bucket":{batch + 10}}}')
        (root / "commits" / str(batch)).write_text("v1\n{}")
        (root / "state/0/0" / f"{batch + 1}.delta").write_bytes(bytes([batch]) * 300)
