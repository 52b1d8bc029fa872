"""The warm hand-off between agent processes: the taker's copy catches up with the running source
(jumping over the batches its cold start left it behind), the consumers switch to it, and the
fragment's output equals a run without the move, every batch once; and a taker killed after its
copy jumped and was committed, before it switched, resumes from that copy's checkpoint.

The agents run with a ``FEDLOAD_WARM_BUDGET_S`` of their own and a movement lease long enough for
a fallback after the budget. The first move, S -> T, is T's first query of the fragment (a JVM's
first query takes 20-40 s to its first batch, longer than the budget; it may fall back); the
second, T -> S, goes to a JVM that has run it and must switch warm, not fall back to
stop-and-copy (on a second round trip at the latest): the jump is what lets a copy catch up on
two shared cores (bench/agents/README.md). The third, S -> T again, is made to jump for certain:
T pauses right after starting its copy ("warming") until S has committed several more batches,
so the copy resumes ``JUMP_MIN_BEHIND`` or more behind and runs them as one batch of its own; T is
then killed at "committed". The registry names T, and the restarted T resumes from a checkpoint
whose batch ids are not S's (``fedload-output-mirror``) without writing a batch twice or skipping
one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.participant.client import FedloadClient
from spark_jobs.runtime.dataplane import registry_tokens
from spark_jobs.runtime.participant_host import FAULT_PAUSE_ENV
from spark_jobs.runtime.soutput import MIRROR_FILE, read_mirror
from spark_jobs.runtime.warm import JUMP_MIN_BEHIND, WARM_BUDGET_ENV
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
    pause_at,
    resume,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Generous for a loaded CI machine: a copy that has not caught up by then is a failure here. The
# lease leaves the budget room to spare (lease_deadline keeps 30% of it for the release, the
# commit or a fallback).
WARM_BUDGET_S = 60.0
LEASE_SECONDS = 120.0


def committed_batches(checkpoint: Path) -> int:
    """The last batch id a fragment's checkpoint committed (-1: none)."""
    commits = checkpoint / "commits"
    ids = [int(p.name) for p in commits.iterdir() if p.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=-1)


def loads(admin: FedloadClient, *, s: float, t: float) -> None:
    admin._call("PATCH", "/v1/tasks/S.base", json={"load": s, "pinned": True})
    admin._call("PATCH", "/v1/tasks/T.base", json={"load": t, "pinned": True})


def move_back_to_s(fed: ProcessFederation, admin: FedloadClient) -> dict[str, float]:
    """S makes room and T gets loaded: T sheds O.x, O (no room) refuses, S takes it back. The
    move's timings."""
    seen = {m["movement_id"] for m in fed.moves()}
    loads(admin, s=0, t=78)
    moved = wait_for(
        "S to take O.x back", lambda: [m for m in fed.moves() if m["movement_id"] not in seen]
    )
    assert [(m["task"], m["src"], m["dst"]) for m in moved] == [("O.x", "T", "S")]
    return dict(moved[0]["timings"])


def test_a_move_switches_to_a_warm_copy_and_the_output_equals_a_run_without_it(tmp_path, spark):
    with federation(tmp_path / "federation", lease_seconds=LEASE_SECONDS) as fed:
        env = {WARM_BUDGET_ENV: str(WARM_BUDGET_S), FAULT_PAUSE_ENV: "armed"}
        for name in ("O", "S", "T"):
            fed.start_agent(name, env=env, spark_eager=eager(name))
        admin = fed.admin()
        wait_for("O.x to write output from S", lambda: output_rows(admin, "O.x") > 0, 180)
        grows(admin, "O.x")  # S's query runs steadily before the copy starts

        loads(admin, s=78, t=0)
        wait_for("T to record the move", lambda: list(fed.moves()), 180)
        assert host_of(admin, "O.x") == "T"
        grows(admin, "O.x")

        # Warm, on the second try at the latest: once in about fifteen full CI runs a copy ran
        # no batch at all within its budget (2026-11-28, both moves of one run; the product
        # fell back correctly), so one more round trip tells a stalled copy from a hand-off that
        # never switches warm, which fails both.
        timings = move_back_to_s(fed, admin)
        if "warm_fallback" in timings:
            print(f"the move back fell back; once more: {timings}")
            loads(admin, s=78, t=0)
            wait_for("T to take O.x again", lambda: host_of(admin, "O.x") == "T", 180)
            timings = move_back_to_s(fed, admin)
        assert "warm_fallback" not in timings, f"moved by stop-and-copy twice: {timings}"
        assert {"warming", "warmed", "resumed"} <= set(timings)
        assert host_of(admin, "O.x") == "S"
        grows(admin, "O.x", by=40)

        # S -> T once more, T's copy held at "warming" while S runs ahead (it jumps), and T
        # killed once the movement is committed, before its copy switched.
        t_data, s_checkpoint = fed.data_dir("T"), fed.data_dir("S") / "checkpoints" / "O.x"
        for step in ("warming", "committed"):
            (t_data / f"pause-{step}").write_text("armed")
        loads(admin, s=78, t=0)
        pause_at(t_data, "warming")
        ahead_of = committed_batches(s_checkpoint)
        wait_for(
            "S to commit more batches while T's copy waits",
            lambda: committed_batches(s_checkpoint) >= ahead_of + JUMP_MIN_BEHIND + 2,
        )
        resume(t_data, "warming")
        pause_at(t_data, "committed")
        t_checkpoint = t_data / "checkpoints" / "O.x"
        mirror = read_mirror(t_checkpoint)
        assert mirror is not None, f"the copy never jumped: no {MIRROR_FILE} (fell back?)"
        assert mirror.segments and all(shift > 0 for _, shift in mirror.segments), mirror
        fed.agents["T"].kill()
        assert host_of(admin, "O.x") == "T"
        assert latest_movement(admin, "O.x")["status"] == "committed"

        for marker in [*t_data.glob("paused-*"), *t_data.glob("resume-*")]:
            marker.unlink()
        fed.start_agent("T", env={WARM_BUDGET_ENV: str(WARM_BUDGET_S)})
        grows(admin, "O.x", by=40)
        assert host_of(admin, "O.x") == "T"
        wait_for("S to drop its copy", lambda: not s_checkpoint.exists())

        comparison = check_fragment(
            spark, admin.endpoint("O"), admin.task("O.x"), GENERATOR, registry_tokens(admin)
        )
        assert comparison.matches, comparison.as_dict()
        assert comparison.rows > 100
