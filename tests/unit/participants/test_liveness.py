from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from app.participants.liveness import liveness

NOW = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("silent", "expected"),
    [(0.0, "online"), (1.0, "online"), (1.01, "suspect"), (3.01, "suspect"), (3600, "suspect")],
)
def test_one_miss_is_suspect_and_silence_alone_never_failed(silent: float, expected: str) -> None:
    last = NOW - timedelta(seconds=silent)
    assert liveness(last, NOW, interval_seconds=1.0) == expected


def test_failed_is_the_registrys_declaration() -> None:
    assert liveness(NOW, NOW, interval_seconds=1.0, failed_at=NOW) == "failed"
    assert liveness(None, NOW, interval_seconds=1.0, failed_at=NOW) == "failed"


def test_never_heard_from_is_unknown() -> None:
    assert liveness(None, NOW, interval_seconds=0.1) == "unknown"
