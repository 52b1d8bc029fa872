"""Stream names on the data plane (app.dataplane.streams)."""

from __future__ import annotations

import pytest

from app.dataplane.streams import StreamName, output_stream, parse_stream, replica_stream


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        ("A.x.out", StreamName("A.x")),
        ("A.x.out@C", StreamName("A.x", "C")),
        ("A.x.out@C.dpc", StreamName("A.x", "C", companion=True)),
        ("A.x", None),
        (".out", None),
        ("A.x.out@", None),
        ("A.x.out@.dpc", None),
        ("A.x@C", None),
        ("@C", None),
    ],
)
def test_names_parse_to_their_task_and_holder(name: str, parsed: StreamName | None) -> None:
    assert parse_stream(name) == parsed


def test_names_round_trip() -> None:
    assert parse_stream(output_stream("P.q")) == StreamName("P.q")
    assert parse_stream(replica_stream("P.q", "H")) == StreamName("P.q", "H")
    assert parse_stream(replica_stream("P.q", "H") + ".dpc") == StreamName("P.q", "H", True)
