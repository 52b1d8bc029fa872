"""SIGKILL of the taker during a warm hand-off (spark_jobs.runtime.warm) after its copy jumped:
the movement committed, the copy not yet switched, its checkpoint carrying the mirror of the
source's batch ids (``fedload-output-mirror``).

The copy is made to jump for certain: the taker pauses right after starting its copy
("warming") until the source has committed several more batches, so the copy resumes
``JUMP_MIN_BEHIND`` or more behind and runs them as one batch of its own. The registry then
names exactly one host, and the restarted taker resumes from a checkpoint whose batch ids are
not the source's without writing a batch twice or skipping one: the fragment's output equals a
run without the move. (A taker killed while its copy follows, before the source is asked to
release, is the "prepared" case of test_agent_crashes.py as far as the source and the registry
can tell: the source never stopped and the movement is aborted at its lease.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.runtime.participant_host import FAULT_PAUSE_ENV
from spark_jobs.runtime.soutput import MIRROR_FILE, read_mirror
from spark_jobs.runtime.warm import JUMP_MIN_BEHIND, WARM_BUDGET_ENV
from spark_jobs.scenarios.processes import ProcessFederation
from spark_jobs.scenarios.reference import check_fragment
from tests.integration.participant.agents import (
    GENERATOR,
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

# Generous for a loaded CI machine: the copy must catch up, not fall back to stop-and-copy;
# the lease outlives the pause at "warming" and the catch-up (the copy's cold first batch took
# 15-20 s at a load of 12 on 2 cores).
WARM_BUDGET_S = 45.0
LEASE_SECONDS = 120.0


def committed_batches(checkpoint: Path) -> int:
    """The last batch id a fragment's checkpoint committed (-1: none)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=-1)


def start_t(fed: ProcessFederation, pause: str | None) -> Path:
    data = fed.data_dir("T")
    for marker in [*data.glob("paused-*"), *data.glob("resume-*")]:
        marker.unlink()
    env = {WARM_BUDGET_ENV: str(WARM_BUDGET_S)}
    if pause:
        env[FAULT_PAUSE_ENV] = pause
    fed.start_agent("T", env=env)
    return data


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_taker_killed_after_its_warm_copy_jumped_resumes_with_exact_output(
    db_url, tmp_path, spark
):
    with federation(tmp_path / "federation", db_url, lease_seconds=LEASE_SECONDS) as fed:
        fed.start_agent("O")
        fed.start_agent("S")
        admin = fed.admin()
        s_checkpoint = fed.data_dir("S") / "checkpoints" / "O.x"
        wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, 180)
        t_data = start_t(fed, "warming,committed")
        overload_s(admin)

        # T's copy, held at "warming" while S runs ahead, jumps; S releases, T commits and dies
        # before switching. T is the host of record; its restart resumes the copy's checkpoint.
        pause_at(t_data, "warming")
        ahead_of = committed_batches(s_checkpoint)
        wait_for(
            "S to commit more batches while T's copy waits",
            lambda: committed_batches(s_checkpoint) >= ahead_of + JUMP_MIN_BEHIND + 2,
        )
        resume(t_data, "warming")
        pause_at(t_data, "committed")
        t_checkpoint = t_data / "checkpoints" / "O.x"
        assert (t_checkpoint / MIRROR_FILE).exists(), "the warm copy never jumped"
        mirror = read_mirror(t_checkpoint)
        assert mirror is not None and mirror.segments
        assert all(shift > 0 for _, shift in mirror.segments), mirror
        fed.agents["T"].kill()
        assert host_of(admin, "O.x") == "T"
        assert latest_movement(admin, "O.x")["status"] == "committed"

        start_t(fed, None)
        grows(admin, "O.x", by=40)
        assert host_of(admin, "O.x") == "T"
        wait_for("S to drop its copy", lambda: not s_checkpoint.exists())
        comparison = check_fragment(
            spark, admin.endpoint("O"), admin.task("O.x"), GENERATOR, registry_tokens(admin)
        )
        assert comparison.matches, comparison.as_dict()
        assert comparison.rows > 100
