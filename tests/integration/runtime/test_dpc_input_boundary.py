"""DPC's heal check reads an input's boundary from its own log or any active copy's
(``spark_jobs.runtime.dpc.input_boundary``): a node whose input is still cut off at its owner
but whose copies answer has healed, as its redo's SUnion reads from the copies. Real Flight
logs, no Spark."""

from __future__ import annotations

import pytest

from spark_jobs.runtime import StreamRef, StreamServer
from spark_jobs.runtime.dpc import InputCutOff, input_boundary
from spark_jobs.runtime.sunion import ANSWERED_WITH_ERROR
from spark_jobs.runtime.transport import publish
from tests.integration.runtime.conftest import BUCKET, GENERATOR, declare

COPY, GHOST = "up.out@T", "up.out@U"


def gone() -> str:
    """The address of a Flight server that was there and is no more: a cut-off host."""
    server = StreamServer()
    location = server.location
    server.shutdown()
    return location


def test_the_furthest_log_that_answers_gives_the_boundary(servers):
    primary, copy = declare(servers["source"], "up.out"), declare(servers["home"], COPY)
    try:
        publish(primary, "up.out", GENERATOR.seconds(0, 2), BUCKET)
        publish(copy, COPY, GENERATOR.seconds(0, 5), BUCKET)
        behind = primary.info("up.out")["boundary"]
        ahead = copy.info(COPY)["boundary"]
        assert ahead > behind
        ref = StreamRef(
            servers["source"].location, "up.out", (StreamRef(servers["home"].location, COPY),)
        )
        assert input_boundary(ref) == ahead
        # Unreplicated: the input's own log alone, as before.
        assert input_boundary(StreamRef(servers["source"].location, "up.out")) == behind
    finally:
        primary.close()
        copy.close()


def test_an_input_cut_off_at_its_owner_is_read_at_its_copy(servers):
    copy = declare(servers["home"], COPY)
    try:
        publish(copy, COPY, GENERATOR.seconds(0, 3), BUCKET)
        # The copy on U never began its log: passed over, not an error.
        ref = StreamRef(
            gone(),
            "up.out",
            (StreamRef(servers["home"].location, GHOST), StreamRef(servers["home"].location, COPY)),
        )
        assert input_boundary(ref, timeout_s=0.3) == copy.info(COPY)["boundary"]
    finally:
        copy.close()


def test_an_input_none_of_whose_logs_answers_is_cut_off(servers):
    ref = StreamRef(gone(), "up.out", (StreamRef(gone(), COPY),))
    with pytest.raises(InputCutOff, match=r"no log of up\.out answered"):
        input_boundary(ref, timeout_s=0.3)
    # An alternate answering with an error is no answer either.
    ref = StreamRef(gone(), "up.out", (StreamRef(servers["home"].location, GHOST),))
    with pytest.raises(InputCutOff):
        input_boundary(ref, timeout_s=0.3)


def test_the_inputs_own_log_answering_with_an_error_is_raised(servers):
    """An owner that answers but has no such stream is a misconfiguration, not a cut."""
    copy = declare(servers["home"], COPY)
    try:
        ref = StreamRef(
            servers["source"].location, "no.such", (StreamRef(servers["home"].location, COPY),)
        )
        with pytest.raises(ANSWERED_WITH_ERROR, match=r"unknown stream 'no\.such'"):
            input_boundary(ref)
    finally:
        copy.close()
