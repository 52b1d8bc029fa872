"""A log's bucket width is part of what its bucket numbers mean: agents of one federation run with
one ``--bucket-seconds``, and a mismatch is refused where it would do harm (a second declaration
at another width, a reader at another width), with a message that names the log and both widths.

Real Flight logs; the reader driven directly (no Spark)."""

from __future__ import annotations

import json

import pyarrow.flight as flight
import pytest

from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.runtime.sunion import SUnionReader, same_width
from spark_jobs.runtime.transport import BucketWidthMismatch, StreamClient, StreamLog, publish
from tests.integration.runtime.conftest import GENERATOR

WIDTH_MESSAGE = r"up\.out has buckets of 0\.1 s, not 1 s: every agent .* same --bucket-seconds"


def test_a_log_keeps_its_width_and_refuses_another() -> None:
    log = StreamLog()
    log.declare("up.out", 0.1)
    log.declare("up.out", 0.1)  # the same declaration again changes nothing
    assert log.info("up.out")["bucket_us"] == 100_000
    with pytest.raises(BucketWidthMismatch, match=WIDTH_MESSAGE):
        log.declare("up.out", 1.0)
    assert log.info("up.out")["bucket_us"] == 100_000


def test_a_partner_declaring_another_width_is_told_why(servers) -> None:
    with StreamClient(servers["source"].location) as owner:
        owner.declare("up.out", 0.1)
        with pytest.raises(flight.FlightServerError, match=WIDTH_MESSAGE):
            owner.declare("up.out", 1.0)
        assert owner.info("up.out")["bucket_us"] == 100_000


def _reader(servers, bucket_ms: int | None, alternates: bool = False) -> SUnionReader:
    source: dict[str, object] = {"location": servers["source"].location, "stream": "up.out"}
    if alternates:
        source["alternates"] = [{"location": servers["home"].location, "stream": "up.out@T"}]
    options = {"inputs": json.dumps([source]), "consumer": "down"}
    if bucket_ms is not None:
        options["bucket_ms"] = str(bucket_ms)
    return SUnionReader(options, CONNECTION_SCHEMA)


@pytest.mark.parametrize("alternates", [False, True], ids=["plain", "replicated"])
def test_a_reader_at_another_width_is_refused_before_reading(servers, alternates) -> None:
    with StreamClient(servers["source"].location) as owner:
        owner.declare("up.out", 0.1)
        publish(owner, "up.out", GENERATOR.seconds(0, 2), 0.1)
        # The reader's default width (1 s), as a plain fragment's reader had at 100 ms buckets.
        reader = _reader(servers, None, alternates)
        with pytest.raises(BucketWidthMismatch, match=r"up\.out has buckets of 0\.1 s, but "):
            reader.initialOffset()
        with pytest.raises(BucketWidthMismatch, match="reads 1 s buckets"):
            reader.latestOffset(None, None)  # type: ignore[arg-type]
        reader.stop()
        # At the log's own width the same reader reads what was published.
        reader = _reader(servers, 100, alternates)
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)  # type: ignore[arg-type]
        assert end["bucket"] - start["bucket"] == 20, (start, end)
        reader.stop()


def test_a_log_that_does_not_say_its_width_is_taken_as_is() -> None:
    info = {"boundary": 3, "first": 0}
    assert same_width(info, 100, "x/y") is info
    assert same_width({**info, "bucket_us": 100_000}, 100, "x/y")["boundary"] == 3


def test_a_writer_counting_boundaries_at_another_width_is_refused(servers) -> None:
    with StreamClient(servers["source"].location) as owner:
        owner.declare("up.out", 0.1)
        owner.advance("up.out", 50, bucket_seconds=0.1)
        owner.advance("up.out", 60)  # a writer that does not say is taken as is
        with pytest.raises(flight.FlightServerError, match="its writer counts 1 s buckets"):
            owner.advance("up.out", 6, bucket_seconds=1.0)
        assert owner.info("up.out")["boundary"] == 60
