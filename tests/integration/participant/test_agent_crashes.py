"""SIGKILL of the target and of the source agent at each phase of a move between processes.

Whatever dies when, the registry names exactly one host, no other agent runs the fragment, and
the fragment's output equals a run without failures: nothing lost, nothing written twice. A
target paused at a phase (FEDLOAD_FAULT_PAUSE) is killed there, or the source is killed while
the target waits there; a movement whose target died before committing is aborted by the
registry when its lease expires, and the source runs the fragment again. These agents move by
stop-and-copy (the default); the warm hand-off (spark_jobs.runtime.warm) has the steps named here
too, and a taker killed after its copy jumped is test_warm_handoff.py's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.runtime.participant_host import FAULT_PAUSE_ENV
from spark_jobs.scenarios.processes import ProcessFederation
from spark_jobs.scenarios.reference import check_fragment
from tests.integration.participant.agents import (
    GENERATOR,
    eager,
    federation,
    grows,
    host_of,
    latest_movement,
    output_rows,
    overload_s,
    pause_at,
    resume,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def restart_t(fed: ProcessFederation, pause: str | None, *, spark: bool = True) -> Path:
    """``spark=False``: this T dies at its pause before it runs anything, so its agent does not
    boot a JVM meanwhile (one less beside S's, whose output the test waits for)."""
    data = fed.data_dir("T")
    for marker in data.glob("paused-*"):
        marker.unlink()
    fed.start_agent("T", env={FAULT_PAUSE_ENV: pause} if pause else {}, spark_eager=spark)
    return data


def s_copy(fed: ProcessFederation) -> Path:
    return fed.data_dir("S") / "checkpoints" / "O.x"


def assert_output_exact(fed: ProcessFederation, spark) -> None:
    admin = fed.admin()
    comparison = check_fragment(
        spark, admin.endpoint("O"), admin.task("O.x"), GENERATOR, registry_tokens(admin)
    )
    assert comparison.matches, comparison.as_dict()


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_target_killed_at_each_phase_leaves_one_host_and_exact_output(db_url, tmp_path, spark):
    with federation(tmp_path / "federation", db_url) as fed:
        fed.start_agent("O", spark_eager=eager("O"))
        fed.start_agent("S")
        t_data = restart_t(fed, "prepared", spark=False)
        admin = fed.admin()
        wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, 180)
        overload_s(admin)

        # prepared: T accepted, then died before asking S for anything. The registry aborts the
        # stale movement; S never stopped.
        pause_at(t_data, "prepared")
        fed.agents["T"].kill()
        first = latest_movement(admin, "O.x")
        wait_for(
            "the stale movement to be aborted",
            lambda: latest_movement(admin, "O.x")["status"] == "aborted",
        )
        assert latest_movement(admin, "O.x")["id"] == first["id"]
        assert host_of(admin, "O.x") == "S"
        grows(admin, "O.x")

        # shipped: S released O.x (stopped after its last batch) and T installed the checkpoint,
        # then T died before committing. The movement is aborted and S runs O.x again.
        t_data = restart_t(fed, "restored", spark=False)
        pause_at(t_data, "restored")
        fed.agents["T"].kill()
        wait_for(
            "the shipped movement to be aborted",
            lambda: latest_movement(admin, "O.x")["status"] == "aborted",
        )
        assert host_of(admin, "O.x") == "S"
        grows(admin, "O.x")

        # committed: T is the host of record but died before starting the query; its restart
        # resumes from the installed checkpoint, and S drops its copy.
        t_data = restart_t(fed, "committed", spark=False)
        pause_at(t_data, "committed")
        fed.agents["T"].kill()
        assert host_of(admin, "O.x") == "T"
        assert latest_movement(admin, "O.x")["status"] == "committed"
        restart_t(fed, None)
        grows(admin, "O.x")
        wait_for("S to drop its copy", lambda: not s_copy(fed).exists())

        # resumed: T runs O.x and dies mid-stream; its restart goes on from the checkpoint.
        fed.agents["T"].kill()
        restart_t(fed, None)
        grows(admin, "O.x")
        assert host_of(admin, "O.x") == "T"
        assert not s_copy(fed).exists()
        assert_output_exact(fed, spark)


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_the_source_killed_at_each_phase_leaves_one_host_and_exact_output(db_url, tmp_path, spark):
    with federation(tmp_path / "federation", db_url) as fed:
        fed.start_agent("O", spark_eager=eager("O"))
        fed.start_agent("S")
        t_data = restart_t(fed, "prepared", spark=False)
        admin = fed.admin()
        wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, 180)
        overload_s(admin)

        # prepared: S dies before T asks it to release. T cannot reach S, aborts; S is still
        # the host of record, and its restart resumes O.x from its own checkpoint.
        pause_at(t_data, "prepared")
        fed.agents["S"].kill()
        resume(t_data, "prepared")
        wait_for(
            "T to abort the movement", lambda: latest_movement(admin, "O.x")["status"] == "aborted"
        )
        assert host_of(admin, "O.x") == "S"
        # S comes back unloaded (so it resumes O.x before trading), then is loaded again.
        admin._call("PATCH", "/v1/tasks/S.base", json={"load": 10})
        fed.start_agent("S")
        grows(admin, "O.x")
        t_data = restart_t(fed, "restored")
        overload_s(admin)

        # shipped: S released O.x and T holds the verified checkpoint when S dies. T commits
        # and runs it; the restarted S sees another host and drops its copy.
        pause_at(t_data, "restored")
        fed.agents["S"].kill()
        resume(t_data, "restored")
        wait_for("T to host O.x", lambda: host_of(admin, "O.x") == "T")
        grows(admin, "O.x")
        fed.start_agent("S")
        wait_for("the restarted S to drop its copy", lambda: not s_copy(fed).exists())
        assert host_of(admin, "O.x") == "T"

        # committed and resumed: S has nothing left to lose; killing it changes nothing.
        fed.agents["S"].kill()
        grows(admin, "O.x")
        assert host_of(admin, "O.x") == "T"
        assert_output_exact(fed, spark)
