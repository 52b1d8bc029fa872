"""A false suspicion does not fail a live host under CPU load (issue 13, item 3).

Real processes: ``fedload serve`` with its failure sweeper (heartbeats every 250 ms, failed
after a window of 3; FALSE_SUSPICION_INTERVAL=0.1 runs it at the detector's default), two
``fedload agent`` processes, L and S, and busy loops, one more than the machine has cores, all
at the same priority. For a while, L's heartbeats must keep it alive: the registry never
declares it failed. The control, under the same load: S's agent is stopped (SIGSTOP, a real
process frozen) and must be declared failed and fenced; resumed (SIGCONT), it learns from its
next heartbeat's answer that it is fenced, drops what it ran and rejoins. Without the control
the test could pass with a detector that never fails anyone. How many rounds the sweeper held
back (silent past the window by the clock, not as checked) is printed: each is a false
suspicion a judge by the clock alone would have made.

Why 250 ms, not 100: beside several other Spark runs (load 33-60 on 2 cores) a 300 ms window
still closed on a live L once or twice in 12 s with every fix here (a heartbeat already sent
waited that long before the service saw it); 750 ms held (load 39: none, 49 rounds held
back). Whether 100 ms holds at CI's load (about 4) was not measured: the machine was never
that quiet.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from app.db.session import dispose_engines, unit_of_work
from app.federation.document import load_federation
from app.models import Participant, ParticipantFailure
from spark_jobs.scenarios.processes import AgentSettings, ProcessFederation
from tests.integration.participant.agents import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

DOC = """
federation: liveness
description: "L stays alive under load; S is frozen and must be declared failed."
participants:
  - {name: L, capacity: 100, cost_model: {kind: mm1}}
  - {name: S, capacity: 100, cost_model: {kind: mm1}}
tasks:
  - {name: L.base, owner: L, load: 10}
  - {name: S.base, owner: S, load: 10}
"""
INTERVAL, MISSES = float(os.environ.get("FALSE_SUSPICION_INTERVAL", "0.25")), 3
LOADED_SECONDS = 12.0


def failures_of(url: str) -> dict[str, list[ParticipantFailure]]:
    with unit_of_work(url) as session:
        names = dict(session.execute(select(Participant.id, Participant.name)).all())
        found: dict[str, list[ParticipantFailure]] = {name: [] for name in names.values()}
        for failure in session.scalars(select(ParticipantFailure)):
            found[names[failure.participant_id]].append(failure)
    dispose_engines(url)
    return found


def busy_loops(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_live_agent_stays_alive_under_cpu_load_and_a_frozen_one_fails(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "liveness.yaml"
    source.write_text(DOC)
    monkeypatch.setenv("FEDLOAD_HEARTBEAT_MISSES", str(MISSES))
    monkeypatch.setenv("FEDLOAD_FAILURE_SWEEP_INTERVAL_SECONDS", "0.05")
    fed = ProcessFederation(
        load_federation(source),
        tmp_path / "federation",
        database_url=db_url,
        heartbeat_interval=INTERVAL,
        agent_settings=AgentSettings(interval=1.0, offer_interval=60.0),
    )
    loops: list[subprocess.Popen[bytes]] = []
    try:
        fed.start()
        for name in ("L", "S"):
            fed.start_agent(name)
        admin = fed.admin()

        def online() -> bool:
            seen = {p["name"]: p["liveness"] for p in admin._call("GET", "/v1/participants")}
            return seen == {"L": "online", "S": "online"}

        wait_for("both agents to heartbeat", online, 120)
        loops = busy_loops((os.cpu_count() or 2) + 1)
        time.sleep(LOADED_SECONDS)
        load = os.getloadavg()[0]
        assert failures_of(db_url) == {"L": [], "S": []}, "a live agent was declared failed"

        # The control, under the same load: a frozen agent is declared failed and fenced.
        agent = fed.agents["S"]
        assert agent.process is not None
        agent.process.send_signal(signal.SIGSTOP)
        frozen = time.monotonic()
        wait_for("S to be declared failed", lambda: failures_of(db_url)["S"], 60, every=0.1)
        detected = time.monotonic() - frozen
        assert admin._call("GET", "/v1/participants/S")["liveness"] == "failed"
        agent.process.send_signal(signal.SIGCONT)
        # Its next heartbeat's answer says fenced; its loop drops what ran there and rejoins.
        wait_for(
            "S to rejoin",
            lambda: all(f.rejoined_at is not None for f in failures_of(db_url)["S"]),
            60,
        )
        assert admin._call("GET", "/v1/participants/S")["failed_at"] is None
        assert failures_of(db_url)["L"] == [], "a live agent was declared failed"
        assert "rejoined the federation" in agent.tail(200)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
        fed.close()
    log = (tmp_path / "federation" / "service.log").read_text()
    held_back = [line for line in log.splitlines() if "held back: L" in line]
    print(
        f"\nload average {load:.1f} under {len(loops)} busy loops; S declared failed "
        f"{detected:.2f} s after SIGSTOP (window {INTERVAL * MISSES:.1f} s); rounds that held "
        f"L back (false suspicions by the clock alone): {len(held_back)}"
    )
    for line in held_back[:5]:
        print(line)
