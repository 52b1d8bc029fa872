"""A real SIGKILL of the agent hosting four fragments; the replica holder's agent takes each over
by its contract's recovery type (gap, rollback, precise twice: from a passive standby and from an
active replica), through the registry's movement path.

One federation of processes for the three types (``spark_jobs.scenarios.crash``, the scenario
``fedload demo --scenario crash`` runs): ``fedload serve`` on SQLite, one ``fedload agent`` per
participant, Spark only in the host S and the holder T. What each type promises is checked
against the failure-free reference (the same fragment over the same seeded input):

- precise: restored from the passive standby S shipped to T; output equals the reference;
- active (precise): T's running DPC copy becomes the host without a restart (the takeover's
  path is ``running_copy``: nothing restored, no query started) and its output continues the
  task's log; output equals the reference;
- rollback: empty state, replayed from the producer's log T kept (upstream backup): nothing lost;
- gap: empty state from the producer's newest input: output resumes, and every lost row lies
  between the output's boundary at the kill and where T resumed (the loss is bounded, and
  reported).
"""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from spark_jobs.scenarios.crash import CrashOptions, run_crash

# Six agents, two of them with Spark, and three reference runs: minutes on a loaded machine.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(1200)]


def test_a_sigkilled_host_fails_over_by_each_contracts_recovery_type(tmp_path, spark) -> None:
    report = run_crash(
        CrashOptions(
            report_dir=tmp_path / "report",
            work=tmp_path / "work",
            before_kill_s=4.0,
            after_recovery_s=8.0,
        ),
        Console(stderr=True),
        spark=spark,
    )
    # A host whose heartbeats lapsed under load is failed over while alive: no crash to measure.
    assert "failed_over_before_kill" not in report, report
    recovery = report["recovery"]
    print(json.dumps({"detection_seconds": report["detection_seconds"], **recovery}, default=str))
    assert set(recovery) == {"gap", "rollback", "precise", "active"}
    assert {"G", "R", "P", "V", "S", "T"} <= set(report["processes"])
    assert len(set(report["processes"].values())) == len(report["processes"])
    assert report["checks"]["host_detected_failed"], report
    for kind, entry in recovery.items():
        assert (entry["to"], entry["recovered"]) == ("T", True), (kind, entry)
        assert entry["rows_at_end"] > entry["rows_before_kill"], (kind, entry)

    precise = recovery["precise"]
    assert precise["performed_as"] == "precise", precise
    assert (precise["lost"], precise["duplicated"]) == (0, 0), precise["output"]
    assert precise["output"]["matches"]

    assert precise["path"] == "restart", precise

    active = recovery["active"]
    assert (active["performed_as"], active["path"]) == ("precise", "running_copy"), active
    # The output after the kill is the copy's, which had run since before it.
    assert active["copy_from"] is not None, active
    assert active["copy_from"] < active["boundary_at_kill"], active
    assert (active["lost"], active["duplicated"]) == (0, 0), active["output"]
    assert active["output"]["matches"]

    rollback = recovery["rollback"]
    assert rollback["performed_as"] == "rollback", rollback
    assert rollback["lost"] == 0, rollback["output"]

    gap = recovery["gap"]
    assert gap["performed_as"] == "gap", gap
    # Whole windows are lost, never half-counted ones: nothing appears that is not the reference's.
    assert gap["duplicated"] == 0, gap["output"]
    assert gap["replay_from"] is not None
    for end in gap["lost_window_ends"]:
        assert gap["boundary_at_kill"] <= end <= gap["replay_from"], gap
    assert report["ok"], report["checks"]
