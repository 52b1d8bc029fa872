"""A participant's own work through agent processes: its files and its NATS stream, its SQL, its
Parquet directory and its NATS subject, through a move between agents and a SIGKILL failover.

One federation of ``fedload serve`` and three ``fedload agent`` processes. O owns everything:
``O.readings`` (a directory of JSON lines) and ``O.events`` (a JetStream stream) enter at O;
``O.hourly`` and ``O.totals`` are SQL over them, hosted by S at first, writing a Parquet
directory and a NATS subject at O. Input keeps arriving throughout:

1. S's synthetic load grows past its threshold and S sheds both fragments to T mid-stream.
2. O places a passive standby of each with S (its contracts ask for precise recovery), and
   T's agent is SIGKILLed: S fails them over from the shipped checkpoint and O's source logs.

At the end the Parquet directory equals a pandas aggregation of every file written, and the
subject's messages (after de-duplication by message id, as JetStream does) equal a pandas
aggregation of every message published: nothing lost, nothing twice, across both relocations.
A partner that does not allow a Python fragment's distribution is never offered it (that case
runs first, while T, which allows it, is alive).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from app.federation.document import load_federation
from app.participant.client import ApiError, FedloadClient
from spark_jobs.runtime.failover import standby_consumer
from spark_jobs.scenarios.processes import AgentSettings, ProcessFederation
from tests.integration.participant.agents import _info, wait_for
from tests.support.components import nats_problem, nats_url, require
from tests.support.event_loop import run_coroutine

pytestmark = [pytest.mark.spark, pytest.mark.slow]

START = datetime(2026, 12, 1, tzinfo=UTC)
STATIONS = ("north", "harbour", "hill")
CATEGORIES = ("sale", "refund")
# Event time advances a minute per round; each round's rows fill its minute.
ROWS_PER_ROUND = 60
WATERMARK_SECONDS = 10
PYTHON_DIST = "fedload-test-fragments"
TASKS = ("O.hourly", "O.totals")


def _readings(round_: int) -> list[dict[str, Any]]:
    out = []
    for i in range(ROWS_PER_ROUND):
        ts = START + timedelta(minutes=round_, seconds=i)
        station = STATIONS[i % len(STATIONS)]
        out.append({"station": station, "ts": ts.isoformat(), "temp": round(10 + i * 0.25, 2)})
    return out


def _events(round_: int) -> list[dict[str, Any]]:
    out = []
    for i in range(ROWS_PER_ROUND):
        ts = START + timedelta(minutes=round_, seconds=i, milliseconds=500)
        out.append({"category": CATEGORIES[i % 2], "ts": ts.isoformat(), "amount": float(i % 7)})
    return out


def _federation_file(work: Path, names: dict[str, str]) -> Path:
    precise = {"recovery": "precise", "max_delay_seconds": 20, "replica_hosting": True}
    contract = {"price_min": 0.24, "price_max": 0.26, "min_move_seconds": 10}
    doc = {
        "federation": "own-work",
        "description": "O's own sources, SQL and sinks, hosted by S and T.",
        "participants": [
            {"name": name, "capacity": 100, "cost_model": {"kind": "mm1"}} for name in "OST"
        ],
        "contracts": [
            {"between": ["O", "S"], **contract, "availability": precise},
            {"between": ["O", "T"], **contract, "availability": precise},
            {"between": ["S", "T"], **contract},
        ],
        "tasks": [
            {
                "name": "O.readings",
                "owner": "O",
                "source": {
                    "kind": "files",
                    "format": "json",
                    "path": str(work / "readings"),
                    "schema": "station STRING, ts TIMESTAMP, temp DOUBLE",
                    "event_time": "ts",
                },
            },
            {
                "name": "O.hourly",
                "owner": "O",
                "host": "S",
                "inputs": [{"task": "O.readings"}],
                "sql": "SELECT window(ts, '1 minute') AS minute, station, "
                "avg(temp) AS mean_temp, count(*) AS n FROM readings "
                "GROUP BY window(ts, '1 minute'), station",
                "watermark": f"{WATERMARK_SECONDS} seconds",
                "sink": {"kind": "parquet", "path": str(work / "results")},
            },
            {
                "name": "O.events",
                "owner": "O",
                "source": {
                    "kind": "nats",
                    "url": nats_url(),
                    "stream": names["in_stream"],
                    "schema": "category STRING, ts TIMESTAMP, amount DOUBLE",
                    "event_time": "ts",
                },
            },
            {
                "name": "O.totals",
                "owner": "O",
                "host": "S",
                "inputs": [{"task": "O.events"}],
                "sql": "SELECT window(ts, '1 minute') AS minute, category, sum(amount) AS total, "
                "count(*) AS n FROM events GROUP BY window(ts, '1 minute'), category",
                "watermark": f"{WATERMARK_SECONDS} seconds",
                "sink": {
                    "kind": "nats",
                    "url": nats_url(),
                    "subject": names["out_subject"],
                    "stream": names["out_stream"],
                },
            },
            # T runs a Python fragment from a distribution only T's operator allows.
            {
                "name": "O.doubled",
                "owner": "O",
                "host": "T",
                "inputs": [{"task": "O.readings"}],
                "python": "fedload_test_fragments.doubled:doubled",
                "distribution": f"{PYTHON_DIST}==1.0",
                "schema": "station STRING, ts TIMESTAMP, temp2 DOUBLE",
            },
            {"name": "S.base", "owner": "S", "load": 10, "synthetic": True},
            # O sits near its threshold (about 80 at these prices): it has no room of its own.
            {"name": "O.base", "owner": "O", "load": 76, "synthetic": True},
        ],
        "simulation": {"offer_interval_seconds": 2, "hysteresis": 0.005},
    }
    path = work / "own-work.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _test_distribution(root: Path) -> Path:
    """An installed distribution as importlib.metadata finds it: a module and its dist-info on
    a path the agents get as PYTHONPATH."""
    package = root / "fedload_test_fragments"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "doubled.py").write_text(
        "from pyspark.sql import functions as F\n\n\n"
        "def doubled(readings):\n"
        "    return readings.select('station', 'ts', (F.col('temp') * 2).alias('temp2'))\n"
    )
    info = root / "fedload_test_fragments-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PYTHON_DIST}\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("fedload_test_fragments\n")
    (info / "RECORD").write_text(
        "fedload_test_fragments/__init__.py,,\nfedload_test_fragments/doubled.py,,\n"
    )
    return root


async def _nats(action: str, names: dict[str, str], rows: list[dict[str, Any]] | None = None):
    import nats

    client = await nats.connect(nats_url())
    js = client.jetstream()
    try:
        if action == "create":
            await js.add_stream(name=names["in_stream"], subjects=[names["in_subject"]])
        elif action == "publish":
            for row in rows or []:
                await js.publish(names["in_subject"], json.dumps(row).encode())
        elif action == "read":
            info = await js.stream_info(names["out_stream"])
            out = []
            for seq in range(info.state.first_seq, info.state.last_seq + 1):
                message = await js.get_msg(names["out_stream"], seq)
                out.append(json.loads(message.data))
            return out
        elif action == "delete":
            for stream in (names["in_stream"], names["out_stream"]):
                with contextlib.suppress(Exception):  # never made, or gone already
                    await js.delete_stream(stream)
        return None
    finally:
        await client.close()


def nats_call(action: str, names: dict[str, str], rows: list[dict[str, Any]] | None = None):
    return run_coroutine(_nats(action, names, rows))


@pytest.fixture(scope="module")
def own_work(tmp_path_factory) -> Iterator[tuple[ProcessFederation, Path, dict[str, str]]]:
    require("NATS JetStream", nats_problem())
    work = tmp_path_factory.mktemp("own-work")
    (work / "readings").mkdir()
    tag = uuid.uuid4().hex[:8]
    names = {
        "in_stream": f"OWN_IN_{tag}",
        "in_subject": f"own.{tag}.in",
        "out_stream": f"OWN_OUT_{tag}",
        "out_subject": f"own.{tag}.out",
    }
    nats_call("create", names)
    dist = _test_distribution(work / "dist")
    fed = ProcessFederation(
        load_federation(_federation_file(work, names)),
        work / "fed",
        lease_seconds=20.0,
        agent_settings=AgentSettings(offer_interval=2.0, spark_eager=True, hysteresis=0.005),
    )
    path = os.pathsep.join([str(dist), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    try:
        fed.start()
        for name in "OST":
            env = {"PYTHONPATH": path}
            if name == "T":
                env["FEDLOAD_FRAGMENTS"] = PYTHON_DIST
            fed.start_agent(name, env=env)
        yield fed, work, names
    except BaseException:
        for name, agent in fed.agents.items():
            print(f"--- {name}'s agent log ---\n{agent.tail(60)}", file=sys.stderr)
        raise
    finally:
        fed.close()
        nats_call("delete", names)


def _write_round(work: Path, names: dict[str, str], round_: int) -> None:
    """One more file in the directory (written aside, then renamed: Spark's file source lists
    whole files) and one more batch of messages on the stream."""
    lines = "".join(json.dumps(row) + "\n" for row in _readings(round_))
    aside = work / f".round-{round_}.tmp"
    aside.write_text(lines)
    aside.rename(work / "readings" / f"round-{round_:03d}.jsonl")
    nats_call("publish", names, _events(round_))


def _minute_end(value: Any) -> datetime:
    stamp = value["end"] if isinstance(value, dict) else value
    parsed = pd.Timestamp(stamp)
    return (parsed.tz_localize(UTC) if parsed.tzinfo is None else parsed).to_pydatetime()


def _closed_before(rounds: int) -> datetime:
    """Windows that the last round's rows close: its minute minus the watermark has passed
    every earlier minute's end."""
    return START + timedelta(minutes=rounds - 1)


def _reference(rows: list[dict[str, Any]], key: str, value: str, how: str) -> list[tuple]:
    frame = pd.DataFrame(rows)
    frame["end"] = pd.to_datetime(frame["ts"]).dt.floor("1min") + pd.Timedelta(minutes=1)
    grouped = frame.groupby(["end", key])[value].agg([how, "count"]).reset_index()
    return sorted(
        (end.to_pydatetime(), k, round(float(v), 6), int(n))
        for end, k, v, n in grouped.itertuples(index=False)
    )


def _parquet_rows(work: Path, before: datetime) -> list[tuple]:
    frame = pd.read_parquet(work / "results")
    out = []
    for row in frame.to_dict("records"):
        end = _minute_end(row["minute"])
        if end <= before:
            out.append((end, row["station"], round(float(row["mean_temp"]), 6), int(row["n"])))
    return sorted(out)


def _subject_rows(names: dict[str, str], before: datetime) -> list[tuple]:
    out = []
    for row in nats_call("read", names) or []:
        end = _minute_end(row["minute"])
        if end <= before:
            out.append((end, row["category"], round(float(row["total"]), 6), int(row["n"])))
    return sorted(out)


def _expected(rounds: int) -> tuple[list[tuple], list[tuple]]:
    before = _closed_before(rounds)
    readings = [r for n in range(rounds) for r in _readings(n)]
    events = [e for n in range(rounds) for e in _events(n)]
    hourly = [r for r in _reference(readings, "station", "temp", "mean") if r[0] <= before]
    totals = [r for r in _reference(events, "category", "amount", "sum") if r[0] <= before]
    return hourly, totals


def _caught_up(work: Path, names: dict[str, str], rounds: int) -> bool:
    hourly, totals = _expected(rounds)
    try:
        before = _closed_before(rounds)
        return _parquet_rows(work, before) == hourly and _subject_rows(names, before) == totals
    except (FileNotFoundError, OSError, ValueError, KeyError):
        return False


def _hosts(admin: FedloadClient) -> dict[str, str]:
    return {t: str(admin.task(t)["host"]) for t in ("O.hourly", "O.totals")}


def test_a_python_fragment_runs_only_where_its_distribution_is_allowed(own_work) -> None:
    fed, work, names = own_work
    admin = fed.admin()
    if not list((work / "readings").glob("round-*.jsonl")):
        _write_round(work, names, 0)

    def advertised(name: str) -> list[str]:
        return list(admin._call("GET", f"/v1/participants/{name}").get("fragments") or [])

    # What each agent's heartbeats say its operator allows (fedload's own always).
    # Each agent's first heartbeat comes when its Spark is up, so S may be later than T.
    wait_for("T's heartbeat to advertise the distribution", lambda: PYTHON_DIST in advertised("T"))
    wait_for("S's heartbeat to advertise what it allows", lambda: bool(advertised("S")))
    assert "fedload" in advertised("S") and PYTHON_DIST not in advertised("S")
    # T runs it: its output grows in O's log.
    wait_for("O.doubled's output", lambda: int(_info(admin, "O.doubled")["rows"]) > 0, 180)
    # An offer of it to S, which did not allow the distribution, is refused by the registry.
    contract = next(
        c
        for c in fed.client("T").contracts("active")
        if {c["proposer"], c["partner"]} == {"S", "T"}
    )
    with pytest.raises(ApiError) as refused:
        fed.client("T")._call(
            "POST",
            "/v1/offers",
            json={"contract_id": contract["id"], "tasks": ["O.doubled"], "price": 0.25},
        )
    assert refused.value.status == 422
    assert PYTHON_DIST in str(refused.value)


def test_own_sql_sources_and_sinks_stay_exact_through_a_move_and_a_sigkill(own_work) -> None:
    fed, work, names = own_work
    admin = fed.admin()
    # The rounds an earlier test of the module wrote are part of the stream too.
    rounds = len(list((work / "readings").glob("round-*.jsonl")))
    for _ in range(3):
        _write_round(work, names, rounds)
        rounds += 1
    wait_for(
        "S's first results in Parquet and on the subject",
        lambda: _caught_up(work, names, rounds),
        timeout=240,
    )
    assert _hosts(admin) == {"O.hourly": "S", "O.totals": "S"}
    analysed = admin.task("O.hourly")
    assert analysed["analysis_error"] is None
    assert "mean_temp double" in analysed["output_schema"]

    # 1. S sheds both fragments to T while input keeps coming.
    admin._call("PATCH", "/v1/tasks/S.base", json={"load": 78, "pinned": True})
    deadline = time.monotonic() + 240
    while _hosts(admin) != {"O.hourly": "T", "O.totals": "T"} and time.monotonic() < deadline:
        _write_round(work, names, rounds)
        rounds += 1
        time.sleep(4)
    assert _hosts(admin) == {"O.hourly": "T", "O.totals": "T"}
    moved = [m for m in admin.movements() if m["task"] in ("O.hourly", "O.totals")]
    assert {(m["task"], m["from"], m["to"], m["status"]) for m in moved} >= {
        ("O.hourly", "S", "T", "committed"),
        ("O.totals", "S", "T", "committed"),
    }, moved
    _write_round(work, names, rounds)
    rounds += 1
    wait_for("T's results", lambda: _caught_up(work, names, rounds), timeout=180)

    # 2. Passive standbys at S (its load stays high, so nothing moves back meanwhile), then
    # T dies with both fragments.
    for task in ("O.hourly", "O.totals"):
        fed.client("O")._call(
            "POST", f"/v1/tasks/{task}/replicas", json={"k": 1, "technique": "passive_standby"}
        )
    for task, source in (("O.hourly", "O.readings"), ("O.totals", "O.events")):
        wait_for(
            f"T to ship {task}'s standby to S",
            lambda task=task, source=source: (
                standby_consumer(task) in (_info(admin, source).get("acks") or {})
            ),
            timeout=120,
        )
    _write_round(work, names, rounds)
    rounds += 1
    fed.agents["T"].kill()
    _write_round(work, names, rounds)
    rounds += 1
    wait_for(
        "S to take both over", lambda: _hosts(admin) == {"O.hourly": "S", "O.totals": "S"}, 180
    )
    _write_round(work, names, rounds)
    rounds += 1
    wait_for("S's results after the failover", lambda: _caught_up(work, names, rounds), 240)

    hourly, totals = _expected(rounds)
    before = _closed_before(rounds)
    assert _parquet_rows(work, before) == hourly
    assert _subject_rows(names, before) == totals
    assert len(hourly) == 3 * (rounds - 1) and len(totals) == 2 * (rounds - 1)
    # DuckDB reads the same directory (any reader, at any time: whole files only).
    import duckdb

    read = duckdb.sql(f"select station, n from '{work / 'results'}/*.parquet'").fetchall()
    assert sorted(read) == sorted(
        (station, n)
        for _end, station, _mean, n in _parquet_rows(work, datetime.max.replace(tzinfo=UTC))
    )
