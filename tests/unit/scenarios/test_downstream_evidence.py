"""The downstream scenario's reading of its samples (``spark_jobs.scenarios.downstream``) and
the agents' fault routes (``FEDLOAD_FAULT_ROUTES``) that let it cut one link between two agents."""

from __future__ import annotations

import pytest

from spark_jobs.runtime.participant_host import fault_routes
from spark_jobs.scenarios.downstream import Sample, downstream_evidence


def sample(primary: int | None, copy: int | None, down: int | None, acked: int | None) -> Sample:
    return Sample(0.0, primary, copy, down, acked, acked)


def test_acknowledgements_past_the_standing_primary_log_count_buckets_read_from_the_copy() -> None:
    at_cut = sample(100, 101, 96, 100)
    during = [sample(100, 103, 97, 102), sample(101, 107, 101, 106), sample(101, 110, 104, 109)]
    found = downstream_evidence(during, at_cut)
    assert found["primary_log_advanced"] == 1
    assert found["copy_log_advanced"] == 9
    assert found["downstream_advanced"] == 8
    assert found["primary_log_max"] == 101
    assert found["acked_max"] == 109
    assert found["buckets_read_from_copy"] == 8
    assert found["downstream_past_primary_log"] == 3


def test_a_downstream_held_to_the_primary_log_read_nothing_from_the_copy() -> None:
    # Without the alternates: O.s's input stands where O's log of O.p stands.
    at_cut = sample(100, 101, 96, 98)
    during = [sample(100, 105, 96, 100), sample(100, 110, 96, 100)]
    found = downstream_evidence(during, at_cut)
    assert found["buckets_read_from_copy"] == 0
    assert found["downstream_advanced"] == 0
    assert found["downstream_past_primary_log"] == -4


def test_logs_that_never_answered_give_no_evidence() -> None:
    found = downstream_evidence([sample(None, None, None, None)], sample(None, None, None, None))
    assert found["buckets_read_from_copy"] is None
    assert found["primary_log_advanced"] is None
    assert found["acked_max"] is None


def test_fault_routes_name_partners_and_default_to_grpc() -> None:
    assert fault_routes(None) == {}
    assert fault_routes("") == {}
    assert fault_routes("O=127.0.0.1:7001, T=grpc+tls://t.example:7002") == {
        "O": "grpc://127.0.0.1:7001",
        "T": "grpc+tls://t.example:7002",
    }


@pytest.mark.parametrize("text", ["O", "=127.0.0.1:1", "O=", "O=a:1,O=b:2"])
def test_fault_routes_refuse_what_they_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="FEDLOAD_FAULT_ROUTES"):
        fault_routes(text)
