"""DPC's reconciliation state survives the driver: a DPC fragment runs in a child process, is
killed with SIGKILL while in UP_FAILURE, and a new process on the same directories heals and
reconciles. The producers and the output log live in this process (they are other hosts), so
what the consumers saw is on the wire, across both drivers.

Run as a module, this file is the child: ``python -m tests.integration.ha.test_spark_dpc_restart
ROOT A B HOME TARGET`` runs the fragment until it is STABLE with ``TARGET`` processed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from app.availability.states import NodeState
from app.availability.tuples import Kind, Message, Row
from spark_jobs.runtime import FragmentRuntime, StreamRef, StreamServer, publish
from spark_jobs.runtime.dpc import DPCFragment, DPCSettings, consumer_view
from tests.integration.ha.spark_dpc_support import (
    FIRST,
    OTHER,
    SECONDS,
    X,
    ms,
    reference,
    spec,
    withheld_inputs,
)
from tests.integration.runtime.conftest import BUCKET, rows

REPO = Path(__file__).resolve().parents[3]
# Later than test_spark_dpc's failure, so that windows were sent stably before it: the restarted
# driver must not send them again.
WITHHELD_FROM = 7


def child(root: Path, a: str, b: str, home: str, target: int) -> int:
    from spark_jobs.session import build_session

    spark = build_session(app_name="dpc-restart", master="local[2]", shuffle_partitions=2)
    host = FragmentRuntime("H", spark, root)
    # The fragment's spec needs only the servers' locations.
    servers = {"a": _Located(a), "b": _Located(b), "home": _Located(home)}
    settings = DPCSettings(X, clock=StreamRef(home, "clock"))
    node = DPCFragment(host, spec(servers, ""), settings, epoch=0)
    print(json.dumps({"resumed": node.resumed, "state": str(node.state)}), flush=True)
    node.start()
    try:
        while True:
            node.poll()
            done = node.state is NodeState.STABLE and node.sink.redo is None
            if done and node.sink.processed_end == target:
                node.query().processAllAvailable()
                return 0
            time.sleep(0.1)
    finally:
        host.close()
        spark.stop()


class _Located:
    def __init__(self, location: str) -> None:
        self.location = location


def _spawn(
    root: Path, servers: dict[str, StreamServer], target: int, log: Path
) -> subprocess.Popen[str]:
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    module = "tests.integration.ha.test_spark_dpc_restart"
    locations = [servers[k].location for k in ("a", "b", "home")]
    args = [sys.executable, "-m", module, str(root), *locations, str(target)]
    return subprocess.Popen(
        args,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
    )


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        for child_pid in map(int, children):
            found += [child_pid, *_descendants(child_pid)]
    return found


def _kill(process: subprocess.Popen[str]) -> None:
    """SIGKILL the driver; its JVM exits when the driver's pipe closes: wait for it, so the new
    driver never shares the checkpoint with a query still running."""
    jvms = _descendants(process.pid)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in jvms) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in jvms:
        if Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def _saved(root: Path) -> dict[str, Any]:
    path = root / "ports.dpc" / "state.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _wait(condition, what: str, process: subprocess.Popen[str], timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"the driver exited ({process.returncode}) before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _wire(server: StreamServer) -> list[tuple[int, Message]]:
    table = server.log.table("out.dpc")
    if table.num_rows == 0:
        return []
    table = table.sort_by("seq").to_pylist()
    out: list[tuple[int, Message]] = []
    for record in table:
        kind = Kind(record["kind"])
        row = None
        if record["row"] is not None:
            row = Row(int(record["row_stime_ms"]), str(record["row"]))
        out.append((int(record["seq"]), Message(kind, row)))
    return out


@pytest.mark.spark
def test_driver_killed_in_failure_reconciles_after_restart(spark, dpc_servers, tmp_path):
    servers = dpc_servers
    host = FragmentRuntime("ref", spark, tmp_path / "ref")
    try:
        expected = reference(servers, host)
    finally:
        host.close()
    budget = DPCSettings(X).delay_budget_ms
    withheld = FIRST + WITHHELD_FROM
    last = FIRST + SECONDS - 1
    clock, a, b = withheld_inputs(servers, WITHHELD_FROM)
    clock.advance("clock", ms(withheld))
    root = tmp_path / "H"

    first = _spawn(root, servers, last + 1, tmp_path / "first.log")
    try:
        _wait(lambda: _saved(root).get("processed_end") == withheld, "the stable prefix", first)
        # Two buckets go out tentatively, then the driver dies in UP_FAILURE.
        clock.advance("clock", ms(withheld + 2) + budget)
        _wait(
            lambda: (
                _saved(root).get("processed_end") == withheld + 2
                and _saved(root).get("state") == "UP_FAILURE"
            ),
            "tentative output",
            first,
        )
    finally:
        _kill(first)
    saved = _saved(root)
    assert saved["checkpoint"]["next_bucket"] == withheld
    assert (root / "ports.dpc" / "stable.tar").stat().st_size > 0
    assert a.info("a")["acks"]["ports"] <= withheld, "the redo needs the tentative buckets"
    stable_before = [m.row for _, m in _wire(servers["home"]) if m.kind is Kind.STABLE and m.row]
    assert stable_before, "the stable prefix was sent before the failure"

    second = _spawn(root, servers, last + 1, tmp_path / "second.log")
    try:
        assert second.stdout is not None
        started = json.loads(second.stdout.readline())
        assert started == {"resumed": True, "state": "UP_FAILURE"}
        # Still in failure after the restart: the rest goes out tentatively, then B heals.
        clock.advance("clock", ms(last + 1) + budget)
        _wait(lambda: _saved(root).get("processed_end") == last + 1, "the tentative rest", second)
        assert _saved(root)["state"] == "UP_FAILURE"
        publish(b, "b", OTHER.seconds(WITHHELD_FROM, SECONDS), BUCKET)
        assert second.wait(timeout=300) == 0
    finally:
        if second.poll() is None:
            _kill(second)

    assert rows(servers["home"].log.table("out")) == expected
    wire = _wire(servers["home"])
    seqs = [seq for seq, _ in wire]
    assert seqs == list(range(len(wire))), "one message per seq across both drivers"
    messages = [m for _, m in wire]
    kinds = [m.kind for m in messages]
    assert kinds.count(Kind.UNDO) == 1
    assert kinds.count(Kind.REC_DONE) == 1
    assert Kind.TENTATIVE not in kinds[kinds.index(Kind.UNDO) :]
    stable = [m.row for m in messages if m.kind is Kind.STABLE and m.row is not None]
    assert stable[: len(stable_before)] == stable_before
    assert len({r.key for r in stable}) == len(stable), "a stable row was sent twice"
    final = consumer_view(messages)
    assert len(final) == len(expected)
    assert [r.key for r in final] == [r.key for r in stable]
    for client in (clock, a, b):
        client.close()


if __name__ == "__main__":
    root_arg, a_arg, b_arg, home_arg, target_arg = sys.argv[1:6]
    raise SystemExit(child(Path(root_arg), a_arg, b_arg, home_arg, int(target_arg)))
