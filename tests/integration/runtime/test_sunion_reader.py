"""SUnion's offset logic against real Flight logs, driven directly (no Spark needed)."""

from __future__ import annotations

import json

import pytest

from spark_jobs.fragments import CONNECTION_SCHEMA
from spark_jobs.generators import split_buckets
from spark_jobs.runtime.sunion import SUnionReader
from spark_jobs.runtime.transport import publish
from tests.integration.runtime.conftest import BUCKET, GENERATOR, declare


def reader(servers, **extra):
    inputs = [
        {"location": servers["source"].location, "stream": "left"},
        {"location": servers["home"].location, "stream": "right"},
    ]
    options = {"inputs": json.dumps(inputs), "consumer": "frag", **extra}
    return SUnionReader(options, CONNECTION_SCHEMA)


def test_bucket_released_only_when_every_input_boundary_passed_it(servers):
    left, right = declare(servers["source"], "left"), declare(servers["home"], "right")
    data = GENERATOR.seconds(0, 6)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    r = reader(servers)
    try:
        start = {"bucket": first}
        publish(left, "left", data, BUCKET)  # left closed through first + 6
        assert r.latestOffset(start, None) == start  # right has sent no boundary: hold all
        publish(right, "right", GENERATOR.seconds(0, 2), BUCKET)  # right closed through +2
        end = r.latestOffset(start, None)
        assert end == {"bucket": first + 2}
        parts = r.partitions(start, end)
        got = sum(batch.num_rows for p in parts for batch in r.read(p))
        expected = GENERATOR.seconds(0, 2).num_rows * 2  # both inputs, buckets first..first+1
        assert got == expected
        publish(right, "right", GENERATOR.seconds(2, 6), BUCKET)
        assert r.latestOffset(end, None) == {"bucket": first + 6}
    finally:
        r.stop()
        left.close()
        right.close()


def test_batch_size_cap_and_acknowledgement_trims_the_producer_log(servers):
    left, right = declare(servers["source"], "left"), declare(servers["home"], "right")
    data = GENERATOR.seconds(0, 6)
    first = min(b for b, _ in split_buckets(data, BUCKET))
    r = reader(servers, max_buckets_per_batch="2", start_bucket=str(first))
    try:
        publish(left, "left", data, BUCKET)
        publish(right, "right", data, BUCKET)
        start = r.initialOffset()
        assert start == {"bucket": first}
        end = r.latestOffset(start, None)
        assert end == {"bucket": first + 2}
        r.commit(end)
        info = left.info("left")
        assert info["acks"] == {"frag": first + 2}
        assert info["rows"] == data.num_rows - GENERATOR.seconds(0, 2).num_rows
    finally:
        r.stop()
        left.close()
        right.close()


@pytest.mark.parametrize(
    ("option", "value"),
    [("call_timeout_ms", "0"), ("info_timeout_ms", "-5"), ("info_timeout_ms", "soon")],
)
def test_a_deadline_that_is_not_a_positive_number_of_ms_is_refused(servers, option, value):
    refused = f"{option} must be a positive number of ms, got '{value}'"
    with pytest.raises(ValueError, match=refused):
        reader(servers, **{option: value})
