from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.participants.liveness import liveness

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("silent", "expected"),
    [(0.0, "online"), (1.0, "online"), (1.01, "suspect"), (3.0, "suspect"), (3.01, "failed")],
)
def test_one_miss_is_suspect_three_are_failed(silent: float, expected: str) -> None:
    last = NOW - timedelta(seconds=silent)
    assert liveness(last, NOW, interval_seconds=1.0, misses=3) == expected


def test_never_heard_from_is_unknown() -> None:
    assert liveness(None, NOW, interval_seconds=0.1, misses=3) == "unknown"
