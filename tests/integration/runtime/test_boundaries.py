"""The output BOUNDARY a fragment publishes after each batch (pure, no Spark)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from spark_jobs.runtime.host import _output_boundary
from spark_jobs.runtime.transport import FencedError, StreamLog


def test_boundary_is_the_bucket_holding_the_watermark():
    event_time = {"watermark": "2026-01-01T00:00:08.000Z"}
    boundary = _output_boundary(event_time, [], 2.0)
    assert boundary * 2 == 1767225608  # bucket [..08, ..10) may still get rows: not closed


def test_no_watermark_yet_means_no_boundary():
    assert _output_boundary({"watermark": "1970-01-01T00:00:00.000Z"}, [], 1.0) is None


def test_stateless_fragment_boundary_is_sunion_end_offset():
    sources = [SimpleNamespace(endOffset='{"bucket": 42}')]
    assert _output_boundary({}, sources, 1.0) == 42


def test_boundary_is_fenced_like_a_write():
    log = StreamLog()
    log.declare("out", 1.0)
    log.advance("out", 5, epoch=0)
    log.fence("out", 1)
    with pytest.raises(FencedError):
        log.advance("out", 9, epoch=0)
    log.advance("out", 3, epoch=1)  # boundaries never go back
    assert log.info("out")["boundary"] == 5
