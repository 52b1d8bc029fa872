"""The warm hand-off between agent processes: the taker's copy catches up with the running source
(jumping over the batches its cold start left it behind), the consumers switch to it, and the
fragment's output equals a run without the move, every batch once.

The agents run with a ``FEDLOAD_WARM_BUDGET_S`` of their own and a movement lease long enough for
a fallback after the budget. The first move, S -> T, is T's first query of the
fragment (a JVM's first query takes 20-30 s to its first batch, longer than any budget; it may
fall back); the second, T -> S, goes to a JVM that has run it and must switch warm, not fall back
to stop-and-copy: the jump is what lets a copy catch up on two shared cores
(bench/agents/README.md).
"""

from __future__ import annotations

import pytest

from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.runtime.warm import WARM_BUDGET_ENV
from spark_jobs.scenarios.reference import check_fragment
from tests.integration.participant.agents import (
    GENERATOR,
    federation,
    grows,
    host_of,
    output_rows,
    overload_s,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Generous for a loaded CI machine: a copy that has not caught up by then is a failure here.
WARM_BUDGET_S = 20.0


def test_a_move_switches_to_a_warm_copy_and_the_output_equals_a_run_without_it(tmp_path, spark):
    with federation(tmp_path / "federation", lease_seconds=WARM_BUDGET_S + 40) as fed:
        for name in ("O", "S", "T"):
            fed.start_agent(name, env={WARM_BUDGET_ENV: str(WARM_BUDGET_S)})
        admin = fed.admin()
        wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, 180)
        grows(admin, "O.x")  # S's query runs steadily before the copy starts

        overload_s(admin)
        wait_for("T to record the move", lambda: list(fed.moves()), 180)
        assert host_of(admin, "O.x") == "T"
        grows(admin, "O.x")

        # S makes room and T gets loaded: T sheds O.x, O (no room) refuses, S takes it back.
        admin._call("PATCH", "/v1/tasks/S.base", json={"load": 0, "pinned": True})
        admin._call("PATCH", "/v1/tasks/T.base", json={"load": 78, "pinned": True})
        moved = wait_for("S to take O.x back", lambda: [m for m in fed.moves() if m["dst"] == "S"])
        assert [(m["task"], m["src"], m["dst"]) for m in moved] == [("O.x", "T", "S")]
        timings = moved[0]["timings"]
        assert "warm_fallback" not in timings, f"moved by stop-and-copy: {timings}"
        assert {"warming", "warmed", "resumed"} <= set(timings)
        assert host_of(admin, "O.x") == "S"
        grows(admin, "O.x", by=40)

        comparison = check_fragment(
            spark, admin.endpoint("O"), admin.task("O.x"), GENERATOR, registry_tokens(admin)
        )
        assert comparison.matches, comparison.as_dict()
        assert comparison.rows > 100
