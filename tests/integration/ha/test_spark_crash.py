"""The crash scenario on Spark: the stateful fragment runs as a Spark streaming query in its own
process; that process (driver, JVM, workers) is SIGKILLed, and the backup process recovers it
once per failover technique through the runtime's movement path. Every check compares with a
failure-free Spark run of the same input; timings are reported, never asserted (shared machine),
except that detection cannot be quicker than the detector's misses allow.
"""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from spark_jobs.ha.scenarios import TECHNIQUES, Timings, run
from tests.support.components import require_java


def test_unknown_engine_or_scenario_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="engine 'flink' does not run 'crash'"):
        run("crash", tmp_path, Timings.quick(), engine="flink")
    with pytest.raises(ValueError, match="unknown scenario 'meltdown'"):
        run("meltdown", tmp_path, Timings.quick())
    assert not (tmp_path / "report.json").exists()


@pytest.mark.spark
@pytest.mark.slow
def test_crash_on_spark_recovers_with_every_technique(tmp_path):
    require_java()
    # The host processes inherit these: executors must run this interpreter.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    timings = Timings.quick()

    report = run("crash", tmp_path, timings, engine="spark")

    assert json.loads((tmp_path / "report.json").read_text())["checks"] == report["checks"]
    assert report["engine"] == "spark" and set(report["techniques"]) == set(TECHNIQUES)
    for technique, result in report["techniques"].items():
        failed = [name for name, passed in result["checks"].items() if not passed]
        assert not failed, f"{technique}: {failed}; {result.get('difference')}"
        assert set(result["checks"]) >= {
            "output_matches_reference",
            "no_duplicates",
            "failover_committed",
            "consumer_on_new_host",
            "old_host_fenced",
        }
        assert result["b_exit_code"] == -signal.SIGKILL
        assert 0 < result["delivered_before_kill"] < result["rows_out"]
        assert result["rows_out"] == result["reference_rows"] > 0
        assert result["movement"]["epoch"] == 1
        assert [(s["from"], s["to"]) for s in result["switches"]] == [("out@B", "out@B2")]
        assert result["detection_ms"] >= timings.heartbeat_ms * timings.misses
        assert result["recovery_ms"] > 0 and result["max_added_latency_ms"] is not None

    upstream = report["techniques"]["upstream_backup"]
    # Replay starts at a window boundary at or after the input's first bucket (state rebuilt).
    assert upstream["replay_from_bucket"] > 0 and upstream["replay_from_bucket"] % 2 == 0
    assert upstream["checkpoint_bytes"] == 0
    passive = report["techniques"]["passive_standby"]
    assert passive["checkpoints_shipped"] >= 1 and passive["checkpoint_bytes"] > 0
    assert passive["movement"]["checkpoint_bytes"] > 0  # restored from B2's inbox
    # Every shipment after the first is a delta onto B2's copy, and the copy B2 restored from
    # (its output checked equal to the reference above) was kept that way.
    assert passive["delta_shipments"] == passive["checkpoints_shipped"] - 1
    assert passive["shipped_bytes"] < passive["whole_pack_bytes"] or passive["delta_shipments"] == 0
    active = report["techniques"]["active_standby"]
    # The replica had produced what B had already delivered: C dropped those by key.
    assert active["resynced_duplicates_dropped"] > 0
    assert report["ok"]
