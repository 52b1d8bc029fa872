"""``Results.rows`` and ``fedload tail`` against a live registry (``fedload serve``'s app in
uvicorn) and agents' Flight endpoints with the agents' token checks: an application gives its
API key, the client gets the read token and the owner's endpoint from the registry.

The agents are StreamServers filled by the test (no Spark): the owner ``A`` keeps ``A.q.out``,
``C`` holds an active copy of ``A.q`` whose DPC companion ``A.q.out@C.dpc`` carries tentative
rows, an UNDO, the correction and REC_DONE."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from app.cli import cli
from app.cli_errors import run
from app.dataplane.tokens import load_public_key
from app.participant.client import ApiError, FedloadClient
from app.results import Results
from app.settings import Settings
from spark_jobs.runtime.dataplane import FlightAuth
from spark_jobs.runtime.dpc import DPC_SCHEMA
from spark_jobs.runtime.transport import StreamServer
from tests.support.live_server import serve

ADMIN = "results-admin-key"
TASK, STREAM, COMPANION = "A.q", "A.q.out", "A.q.out@C.dpc"


@dataclass
class World:
    url: str
    keys: dict[str, str]
    servers: dict[str, StreamServer]


def rows(*pairs: tuple[float, str]) -> pa.Table:
    return pa.table(
        {
            "stime": pa.array([round(s * 1e6) for s, _ in pairs], pa.timestamp("us", tz="UTC")),
            "src": pa.array([n for _, n in pairs], pa.string()),
            "n": pa.array([int(s * 10) for s, _ in pairs], pa.int64()),
        }
    )


@pytest.fixture
def world(sqlite_template: Path, tmp_path: Path) -> Iterator[World]:
    database = tmp_path / "registry.db"
    shutil.copy(sqlite_template, database)
    settings = Settings(
        database_url=f"sqlite:///{database}",
        admin_key=ADMIN,
        environment="test",
        dataplane_key_file=tmp_path / "dataplane-key.pem",
    )
    servers: dict[str, StreamServer] = {}
    with serve(settings) as url:
        admin = FedloadClient(url, ADMIN)
        keys: dict[str, str] = {}
        for name in ("A", "B", "C"):
            made = admin._call("POST", "/v1/participants", json={"name": name, "capacity": 100})
            keys[name] = made["api_key"]
        clients = {name: FedloadClient(url, key) for name, key in keys.items()}
        public = tuple(load_public_key(pem) for pem in admin.dataplane_keys())
        try:
            for name in ("A", "C"):
                servers[name] = StreamServer(auth=FlightAuth(name, public))
                clients[name].heartbeat(endpoint=servers[name].location)
            contract = clients["A"]._call(
                "POST",
                "/v1/contracts",
                json={
                    "partner": "C",
                    "price_min": 0.2,
                    "price_max": 0.3,
                    "availability": {"recovery": "precise", "replica_hosting": True},
                },
            )
            accept = f"/v1/contracts/{contract['id']}/accept"
            clients["C"]._call("POST", accept, json={"version": 1})
            clients["A"]._call("POST", "/v1/tasks", json={"name": TASK, "load": 5})
            servers["A"].log.declare(STREAM, 1.0)
            yield World(url, keys, servers)
        finally:
            for server in servers.values():
                server.shutdown()
            for client in (admin, *clients.values()):
                client.close()


def stamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(int(seconds))) + (
        f".{round((seconds % 1) * 1e6):06d}+00:00" if seconds % 1 else "+00:00"
    )


def test_rows_are_the_final_buckets_stable_rows_read_with_the_owners_key(world: World) -> None:
    log = world.servers["A"].log
    log.append(STREAM, rows((0.5, "x"), (1.5, "y")), batch_id=0, boundary=2)
    log.append(STREAM, rows((2.5, "open")), batch_id=1)  # bucket 2 is not final yet
    with Results(world.url, world.keys["A"]) as results:
        found = list(results.rows(TASK))
        # No active copy: a primary writes stable rows only, and says so when asked.
        kinds = [r["kind"] for r in results.rows(TASK, tentative=True)]
    assert found == [
        {"stime": stamp(0.5), "src": "x", "n": 5},
        {"stime": stamp(1.5), "src": "y", "n": 15},
    ]
    assert kinds == ["STABLE", "STABLE"]


def test_a_stranger_gets_no_token(world: World) -> None:
    with Results(world.url, world.keys["B"]) as results, pytest.raises(ApiError) as refused:
        list(results.rows(TASK))
    assert refused.value.status == 404


def test_follow_prints_each_bucket_as_it_closes(world: World) -> None:
    log = world.servers["A"].log
    log.append(STREAM, rows((0.5, "old")), batch_id=0, boundary=1)
    seen: list[dict[str, Any]] = []
    done = threading.Event()

    def consume() -> None:
        with Results(world.url, world.keys["A"], poll_seconds=0.05) as results:
            for row in results.rows(TASK, follow=True, from_start=False):
                seen.append(row)
                if len(seen) == 2:
                    break
        done.set()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    time.sleep(0.5)
    log.append(STREAM, rows((1.2, "a"), (2.5, "b")), batch_id=1, boundary=2)
    time.sleep(0.3)
    assert [r["src"] for r in seen] == ["a"]  # bucket 2 still open; "old" came before
    log.advance(STREAM, 3)
    assert done.wait(10)
    assert [r["src"] for r in seen] == ["a", "b"]


def companion_message(seq: int, kind: str, at_ms: int | None, row: dict | None) -> dict:
    return {
        "stime": 1_000_000_000 + seq,
        "seq": seq,
        "kind": kind,
        "row_stime_ms": at_ms,
        "row": None if row is None else json.dumps(row, sort_keys=True),
    }


def test_tentative_reads_the_active_copys_messages_with_their_kinds(world: World) -> None:
    a = FedloadClient(world.url, world.keys["A"])
    try:
        a._call("POST", f"/v1/tasks/{TASK}/replicas", json={"k": 1})
    finally:
        a.close()
    messages = [
        companion_message(0, "STABLE", 500, {"src": "x", "n": 5}),
        companion_message(1, "TENTATIVE", 1500, {"src": "t", "n": 15}),
        companion_message(2, "UNDO", None, None),
        companion_message(3, "STABLE", 1500, {"src": "y", "n": 15}),
        companion_message(4, "REC_DONE", None, None),
    ]
    copy = world.servers["C"].log
    copy.declare(COMPANION, 1.0)
    copy.append(COMPANION, pa.Table.from_pylist(messages, schema=DPC_SCHEMA))
    with Results(world.url, world.keys["A"]) as results:
        found = list(results.rows(TASK, tentative=True))
    assert [(r["kind"], r["seq"], r.get("src")) for r in found] == [
        ("STABLE", 0, "x"),
        ("TENTATIVE", 1, "t"),
        ("UNDO", 2, None),
        ("STABLE", 3, "y"),
        ("REC_DONE", 4, None),
    ]
    assert found[1]["stime"] == stamp(1.5)
    assert {r["replica"] for r in found} == {"C"}


def test_fedload_tail_prints_json_lines(world: World, capsys: pytest.CaptureFixture[str]) -> None:
    world.servers["A"].log.append(STREAM, rows((0.5, "x"), (1.5, "y")), batch_id=0, boundary=2)
    status = run(cli, ["tail", TASK, "--api", world.url, "--key", world.keys["A"]])
    out = capsys.readouterr().out.splitlines()
    assert status in (0, None)
    assert [json.loads(line) for line in out] == [
        {"stime": stamp(0.5), "src": "x", "n": 5},
        {"stime": stamp(1.5), "src": "y", "n": 15},
    ]
    status = run(cli, ["tail", TASK, "--api", world.url, "--key", world.keys["B"]])
    captured = capsys.readouterr()
    assert status == 2
    assert "refused to read A.q's output" in captured.err


def test_fedload_tail_needs_a_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("FEDLOAD_API_KEY", raising=False)
    assert run(cli, ["tail", TASK, "--api", "http://127.0.0.1:9"]) == 2
    assert "--key" in capsys.readouterr().err
    assert run(cli, ["tail"]) == 2  # no task
