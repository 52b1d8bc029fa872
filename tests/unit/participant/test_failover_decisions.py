"""Who fails a task over and how (app.participant.failover): pure, no Spark, no network."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.participant.failover import (
    align_up,
    backup_point,
    effective,
    kept,
    plan_failovers,
    recovery_of,
    replay_from,
    window_span,
)

TASKS = [
    {"name": "G.x", "owner": "G", "host": "S"},
    {"name": "P.x", "owner": "P", "host": "S"},
    {"name": "Q.x", "owner": "P", "host": "U"},
]
CONTRACTS = [
    {"id": 1, "availability": {"recovery": "gap", "replica_hosting": True}},
    {"id": 2, "availability": {"recovery": "precise", "max_delay_seconds": 3}},
    {"id": 3, "availability": None},
]
REPLICAS = [
    {"task": "G.x", "host": "T", "technique": "upstream_backup", "contract_id": 1},
    {"task": "P.x", "host": "T", "technique": "passive_standby", "contract_id": 2},
    {"task": "Q.x", "host": "T", "technique": "upstream_backup", "contract_id": 3},
]


def test_the_holder_fails_over_what_the_registry_sees_failed_by_each_contract() -> None:
    plans = plan_failovers("T", TASKS, REPLICAS, CONTRACTS, {"S": "failed", "U": "online"})
    assert [(f.task, f.failed_host, f.taker, f.recovery) for f in plans] == [
        ("G.x", "S", "T", "gap"),
        ("P.x", "S", "T", "precise"),
    ]
    assert plans[1].max_delay_seconds == 3


def test_takeovers_by_a_running_copy_come_before_restarts() -> None:
    tasks = [
        *TASKS,
        {"name": "A.x", "owner": "P", "host": "S"},
        {"name": "Z.x", "owner": "P", "host": "S"},
    ]
    replicas = [
        *REPLICAS,
        {"task": "Z.x", "host": "T", "technique": "active_standby", "contract_id": 2},
        {"task": "A.x", "host": "T", "technique": "passive_standby", "contract_id": 2},
    ]
    plans = plan_failovers("T", tasks, replicas, CONTRACTS, {"S": "failed"})
    assert [f.task for f in plans] == ["Z.x", "A.x", "G.x", "P.x"]


@pytest.mark.parametrize("seen", ["online", "suspect", "unknown", None])
def test_no_failover_before_the_registry_says_failed(seen: str | None) -> None:
    liveness = {} if seen is None else {"S": seen, "U": seen}
    assert plan_failovers("T", TASKS, REPLICAS, CONTRACTS, liveness) == []


def test_only_the_replica_holder_starts_it() -> None:
    failed = {"S": "failed", "U": "failed"}
    # The owner and any other participant see the replicas but hold none: they start nothing.
    assert plan_failovers("P", TASKS, REPLICAS, CONTRACTS, failed) == []
    assert plan_failovers("S", TASKS, REPLICAS, CONTRACTS, failed) == []
    # A task the holder already hosts is not taken over again.
    hosted = [{**t, "host": "T"} for t in TASKS]
    assert plan_failovers("T", hosted, REPLICAS, CONTRACTS, {"T": "failed"}) == []


def test_without_a_recovery_term_the_technique_decides() -> None:
    plans = plan_failovers("T", TASKS, REPLICAS, CONTRACTS, {"U": "failed"})
    assert [(f.task, f.recovery) for f in plans] == [("Q.x", "rollback")]
    assert recovery_of(None, "passive_standby") == "precise"
    assert recovery_of({"recovery": "gap"}, "passive_standby") == "gap"
    with pytest.raises(ValueError, match="recovery type 'lossy'"):
        recovery_of({"recovery": "lossy"}, "passive_standby")
    with pytest.raises(ValueError, match="technique 'mirror'"):
        recovery_of(None, "mirror")


def test_what_the_holder_keeps() -> None:
    keeps = kept("T", REPLICAS, CONTRACTS)
    assert [(k.task, k.recovery) for k in keeps] == [
        ("G.x", "gap"),
        ("P.x", "precise"),
        ("Q.x", "rollback"),
    ]
    assert kept("S", REPLICAS, CONTRACTS) == []
    # X, the contract's maximum delay, is an active replica's delay budget: carried, or None.
    assert [k.max_delay_seconds for k in keeps] == [None, 3.0, None]


def test_precise_without_a_shipped_checkpoint_degrades_to_rollback() -> None:
    assert effective("precise", holds_checkpoint=True) == "precise"
    assert effective("precise", holds_checkpoint=False) == "rollback"
    assert effective("gap", holds_checkpoint=False) == "gap"


def test_replay_points() -> None:
    # Gap: the next window start at or after the newest complete bucket.
    assert replay_from("gap", newest=103, kept_from=None, span=4) == 104
    assert replay_from("gap", newest=104, kept_from=None, span=4) == 104
    # Rollback: the window start the upstream backup was kept from; precise: the checkpoint's.
    assert replay_from("rollback", newest=None, kept_from=97, span=4) == 96
    assert replay_from("precise", newest=None, kept_from=None, span=4) is None
    with pytest.raises(ValueError, match="newest"):
        replay_from("gap", newest=None, kept_from=None, span=4)
    assert window_span({"window_seconds": 4}, {"window_seconds": 10}, 1.0) == 4
    assert window_span({}, {"window_seconds": 10}, 1.0) == 10
    assert window_span({}, {}, 1.0) == 1


@given(
    ack=st.integers(min_value=0, max_value=10**6),
    lag=st.integers(min_value=0, max_value=100),
    span=st.integers(min_value=1, max_value=60),
)
def test_the_backup_point_keeps_every_window_not_yet_emitted(ack: int, lag: int, span: int) -> None:
    boundary = max(0, ack - lag)  # the output's boundary lags the input the host acknowledged
    kept_from = backup_point(ack, boundary, span)
    assert kept_from is not None and kept_from % span == 0
    # Every window ending after the boundary (not emitted yet) starts at or after the point.
    first_open_end = align_up(boundary + 1, span)
    assert kept_from <= max(0, first_open_end - span)
    # And no more than one window more than that is kept.
    assert kept_from >= boundary - 2 * span
    assert backup_point(ack, None, span) is None
