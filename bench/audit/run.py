"""What the audit chain costs a write: audited against unaudited commits, same run, PostgreSQL.

Every audited transaction extends one of the log's hash chains under that chain's head row lock
(taken at the end of the transaction, ``app/audit/sealing.py``); a writer takes the first head
no other holds, so concurrent audited writers queue only when every chain is busy. This
measures, on one scratch database, commits per second of a one-row write (each thread its own
participant row, so rows never contend) with and without one audit entry, with 1 and with 8
threads; variants alternate over the rounds and the median is reported, so machine load hits
both alike. Figures go to ``results.json``.

    python -m bench.audit.run [--seconds 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

from app.audit import service as audit
from app.db.migrate import upgrade
from app.db.session import dispose_engines, unit_of_work
from app.models import Participant

HERE = Path(__file__).resolve().parent
SERVER = os.environ.get("FEDLOAD_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1/test")


def commits_per_second(url: str, threads: int, audited: bool, seconds: float) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def work(n: int) -> None:
        while time.monotonic() < stop:
            with unit_of_work(url) as session:
                session.execute(
                    sa.update(Participant)
                    .where(Participant.name == f"P{n}")
                    .values(endpoint=f"grpc://h{n}:{counts[n]}")
                )
                if audited:
                    audit.record(
                        session,
                        actor=f"participant:P{n}",
                        action="bench.write",
                        entity_type="participant",
                        entity_id=n + 1,
                        detail={"k": counts[n]},
                    )
            counts[n] += 1

    pool = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    started = time.monotonic()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return sum(counts) / (time.monotonic() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    name = f"fedload_bench_audit_{uuid.uuid4().hex[:6]}"
    server = sa.create_engine(SERVER, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = make_url(SERVER).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        with unit_of_work(url) as session:
            for n in range(8):
                session.add(
                    Participant(
                        name=f"P{n}",
                        capacity=10,
                        profile={},
                        cost_model={},
                        api_key_hash=f"{n:064d}",
                    )
                )
        figures: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for threads in (1, 8):
                for audited in (False, True):
                    key = f"{threads} thread(s), {'audited' if audited else 'plain'}"
                    rate = commits_per_second(url, threads, audited, args.seconds)
                    figures.setdefault(key, []).append(rate)
        medians = {k: round(statistics.median(v), 1) for k, v in figures.items()}
        result = {
            "commits_per_second": medians,
            "audited_over_plain": {
                f"{t} thread(s)": round(
                    medians[f"{t} thread(s), audited"] / medians[f"{t} thread(s), plain"], 3
                )
                for t in (1, 8)
            },
            "load_average": os.getloadavg(),
            "cpus": os.cpu_count(),
            "seconds_per_run": args.seconds,
            "rounds": args.rounds,
        }
        print(json.dumps(result, indent=2))
        (HERE / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    finally:
        dispose_engines(url)
        with server.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        server.dispose()


if __name__ == "__main__":
    main()
