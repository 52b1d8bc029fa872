"""The API under a mixed workload: ``python -m bench.api.run [--workers 1 2] [--seconds 20]``.

For each worker count: a fresh PostgreSQL database, ``fedload serve --workers N`` as its own
process (production settings, access log off), a seeded federation, then ``--users`` pairs of
participants, each negotiating with its own partner so that every request is real work and
none is a lost race: propose, get, list, counter, get, list offers, accept, get, list, list
offers, terminate, get (4 writes, 8 reads). Reports req/s, p50/p99 latency, errors (any
unexpected status), and the load average before and while it ran. Figures go in
bench/api/README.md; performance is never asserted in a test.

Two ways to drive it. A closed loop (the default): each pair starts its next cycle when the
last one ends, so the service is always saturated and the latency is mostly the queue of
``--users`` cycles in flight (at X req/s a request takes users / X seconds on average, by
Little's law): it measures the most the service serves. An open loop (``--rate R``): cycles
arrive at random times, R/12 a second, whatever the answers (as independent clients do), so
the latency is what a client sees at R req/s: the figure the issue's target (500 req/s with
p99 under 50 ms) is about.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa
import uvloop
from sqlalchemy.engine import make_url

from app.dataplane.tokens import new_signing_key, private_pem
from app.server import free_port
from bench.api.loadgen import Connection, Tally, percentile
from tests.support.components import postgres_url

ADMIN_KEY = "bench-admin-key"
SERVICE_PGID: dict[int, int] = {}
HOST = "127.0.0.1"


@contextmanager
def fresh_database() -> Iterator[str]:
    server = postgres_url()
    name = f"fedload_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :n AND pid <> pg_backend_pid()"
                ),
                {"n": name},
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of ``pids`` (gone processes count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat)
    return total / CLOCK_TICKS


def process_group(pgid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def database_backends(database_url: str) -> list[int]:
    engine = sa.create_engine(database_url)
    try:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT pid FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    )
                ).scalars()
            )
    finally:
        engine.dispose()


@contextmanager
def service(
    database_url: str, workers: int, extra_env: dict[str, str], root: Path | None = None
) -> Iterator[int]:
    port = free_port()
    # Production settings name the data plane's signing key: a fresh one per run.
    signing_key = Path(tempfile.mkdtemp(prefix="fedload-bench-")) / "dataplane.pem"
    signing_key.write_bytes(private_pem(new_signing_key()))
    env = {
        **os.environ,
        "FEDLOAD_DATAPLANE_KEY_FILE": str(signing_key),
        "DATABASE_URL": database_url,
        "FEDLOAD_ADMIN_KEY": ADMIN_KEY,
        "FEDLOAD_SESSION_SECRET": "bench-session-secret",
        "FEDLOAD_ENVIRONMENT": "production",
        **_code_from(root),
        **extra_env,
    }
    command = [sys.executable, "-m", "app", "serve", "--host", HOST, "--port", str(port)]
    # The service logs one JSON line per request to stderr: into a file, never an unread pipe
    # (a full pipe blocks the server's logging, and with it every request).
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed after the service stops)
    process = subprocess.Popen(
        [*command, "--workers", str(workers)],
        env=env,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=log,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None:
                log.seek(0)
                failure = log.read().decode()[-2000:]
                raise RuntimeError(f"fedload serve exited: {failure}")
            try:
                if httpx.get(f"http://{HOST}:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("fedload serve did not become ready within 120 s")
            time.sleep(0.3)
        SERVICE_PGID[port] = process.pid
        yield port
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()


def seed(port: int, users: int) -> list[tuple[str, str, str]]:
    """Two participants per virtual user: (proposer key, partner key, partner name)."""
    pairs = []
    with httpx.Client(base_url=f"http://{HOST}:{port}", timeout=60) as client:
        admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
        for u in range(users):
            keys = []
            for side in ("a", "b"):
                r = client.post(
                    "/v1/participants",
                    json={"name": f"u{u}{side}", "capacity": 100},
                    headers=admin,
                )
                r.raise_for_status()
                keys.append(r.json()["api_key"])
            pairs.append((keys[0], keys[1], f"u{u}b"))
    return pairs


REQUESTS_PER_CYCLE = 12


class Pair:
    """Two participants negotiating with each other, one keep-alive connection each."""

    def __init__(self, port: int, keys: tuple[str, str, str]) -> None:
        self.a = Connection(HOST, port, keys[0])
        self.b = Connection(HOST, port, keys[1])
        self.partner = keys[2]

    async def close(self) -> None:
        await self.a.close()
        await self.b.close()


async def negotiate(
    pair: Pair, tally: Tally, window: tuple[float, float], first_due: float | None = None
) -> None:
    """One cycle: propose, get, list, counter, get, list offers, accept, get, list, list
    offers, terminate, get. Requests sent within ``window`` (after the warm-up, before the end)
    are recorded. Each request's latency runs from when it was sent, the first one's from
    ``first_due`` when given (an open loop's arrival time: a generator running late must not
    hide the wait from the figures)."""
    due = first_due

    async def call(
        op: str, conn: Connection, method: str, path: str, body: Any, ok: int, parse: bool = False
    ) -> Any:
        nonlocal due
        started = time.perf_counter() if due is None else due
        due = None
        reply = await conn.request(method, path, body)
        tally.sent += 1
        if window[0] <= started < window[1]:
            tally.record(op, started, reply.status == ok)
        # Only the proposal's answer is read (for the contract's id): parsing every body
        # would be the generator's CPU, taken from the service on the same two cores.
        return reply.json() if parse and reply.status == ok and reply.body else None

    a, b = pair.a, pair.b
    terms = {"partner": pair.partner, "price_min": 0.8, "price_max": 1.0}
    made = await call("propose", a, "POST", "/v1/contracts", terms, 201, parse=True)
    if made is None:
        return
    path = f"/v1/contracts/{made['id']}"
    await call("get", b, "GET", path, None, 200)
    await call("list", a, "GET", "/v1/contracts?limit=20", None, 200)
    counter = {"version": 1, "price_min": 0.9, "price_max": 1.0}
    await call("counter", b, "POST", f"{path}/counter", counter, 200)
    await call("get", a, "GET", path, None, 200)
    await call("offers", b, "GET", "/v1/offers?limit=20", None, 200)
    await call("accept", a, "POST", f"{path}/accept", {"version": 2}, 200)
    await call("get", b, "GET", path, None, 200)
    await call("list", b, "GET", "/v1/contracts?limit=20&status=active", None, 200)
    await call("offers", a, "GET", "/v1/offers?limit=20", None, 200)
    await call("terminate", a, "POST", f"{path}/terminate", {"version": 3}, 200)
    await call("get", a, "GET", path, None, 200)


async def virtual_user(pair: Pair, tally: Tally, window: tuple[float, float]) -> None:
    """Closed loop: the next cycle as soon as the last one ended."""
    try:
        while time.perf_counter() < window[1]:
            await negotiate(pair, tally, window)
    finally:
        await pair.close()


async def open_loop(
    pairs: list[Pair], tally: Tally, rate: float, window: tuple[float, float]
) -> None:
    """Open loop: cycles arrive at random (Poisson) times, ``rate / 12`` a second on average,
    whether or not earlier ones have finished, each on a pair of participants no other cycle
    is using. An arrival that finds every pair busy is counted (``no_free_pair``), not queued:
    the service is not keeping up with the rate."""
    rng = random.Random(15)
    free = list(pairs)
    running: set[asyncio.Task[None]] = set()

    async def cycle(pair: Pair, due: float) -> None:
        try:
            await negotiate(pair, tally, window, first_due=due)
        except (ConnectionError, RuntimeError) as exc:  # counted, never lost with its task
            tally.errors[f"connection: {type(exc).__name__}"] = (
                tally.errors.get(f"connection: {type(exc).__name__}", 0) + 1
            )
            await pair.close()
        finally:
            free.append(pair)

    due = time.perf_counter()
    while True:
        due += rng.expovariate(rate / REQUESTS_PER_CYCLE)
        if due >= window[1]:
            break
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        if not free:
            if due >= window[0]:
                tally.no_free_pair += 1
            continue
        task = asyncio.create_task(cycle(free.pop(), due))
        running.add(task)
        task.add_done_callback(running.discard)
    await asyncio.gather(*running)
    for pair in pairs:
        await pair.close()


async def drive(
    port: int,
    keys: list[tuple[str, str, str]],
    seconds: float,
    warmup: float,
    rate: float | None = None,
) -> Tally:
    tally = Tally()
    pairs = [Pair(port, k) for k in keys]
    now = time.perf_counter()
    window = (now + warmup, now + warmup + seconds)
    if rate is not None:
        await open_loop(pairs, tally, rate, window)
    else:
        await asyncio.gather(*(virtual_user(p, tally, window) for p in pairs))
    tally.connections = sum(p.a.connections + p.b.connections for p in pairs)
    return tally


def _code_from(root: Path | None) -> dict[str, str]:
    """The environment that makes a service process import fedload from ``root``."""
    return {} if root is None else {"PYTHONPATH": str(root)}


def measure(
    workers: int,
    users: int,
    seconds: float,
    warmup: float,
    env: dict[str, str],
    root: Path | None = None,
    rate: float | None = None,
) -> dict[str, Any]:
    with fresh_database() as url:
        subprocess.run(
            [sys.executable, "-m", "app", "db", "upgrade"],
            env={**os.environ, "DATABASE_URL": url, **_code_from(root)},
            cwd=root,
            check=True,
            capture_output=True,
        )
        with service(url, workers, env, root) as port:
            pairs = seed(port, users)
            load_before = os.getloadavg()[0]
            # CPU seconds per request, by who spends them: the load-independent figure on a
            # machine shared with other work. Measured over warm-up and run alike.
            servers = process_group(SERVICE_PGID[port])
            backends = database_backends(url)
            cpu_at_start = (cpu_seconds(servers), cpu_seconds(backends), time.process_time())
            # uvloop (installed with uvicorn[standard]) for the generator as for the service:
            # the generator's event loop is CPU the service does not get.
            with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
                tally = runner.run(drive(port, pairs, seconds, warmup, rate))
            backends = sorted(set(backends) | set(database_backends(url)))
            cpu_used = (
                cpu_seconds(servers) - cpu_at_start[0],
                cpu_seconds(backends) - cpu_at_start[1],
                time.process_time() - cpu_at_start[2],
            )
            load_during = os.getloadavg()[0]
    every = [x for values in tally.latencies.values() for x in values]
    sent = tally.sent
    per_request_ms = [round(1000 * c / max(sent, 1), 2) for c in cpu_used]
    return {
        "workers": workers,
        # closed: ``users`` pairs each start a cycle when their last one ends; open: cycles
        # arrive at ``offered_req_per_s`` whatever the answers, on ``users`` pairs at most.
        "mode": "closed" if rate is None else "open",
        "offered_req_per_s": rate,
        "no_free_pair": tally.no_free_pair,
        "connections_opened": tally.connections,
        "users": users,
        "seconds": seconds,
        "requests": len(every),
        "req_per_s": round(len(every) / seconds, 1),
        "p50_ms": round(percentile(every, 0.50) * 1000, 1),
        "p99_ms": round(percentile(every, 0.99) * 1000, 1),
        "errors": sum(tally.errors.values()),
        "errors_by_op": tally.errors,
        "p99_ms_by_op": {
            op: round(percentile(v, 0.99) * 1000, 1) for op, v in tally.latencies.items()
        },
        # CPU ms per request: service processes, PostgreSQL backends, this load generator.
        "cpu_ms_per_request": dict(
            zip(("service", "postgres", "loadgen"), per_request_ms, strict=True)
        ),
        # What the CPUs could serve if this were all the machine did (a quiet machine).
        "quiet_machine_req_per_s_estimate": round(
            (os.cpu_count() or 1) * 1000 / max(sum(per_request_ms), 1e-9)
        ),
        "load_1min_before": round(load_before, 2),
        "load_1min_after": round(load_during, 2),
        "cpus": os.cpu_count(),
        "env": env,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--users",
        type=int,
        default=16,
        help="Pairs of participants: closed loop, the concurrent virtual users; open loop "
        "(--rate), the most cycles in progress at once.",
    )
    parser.add_argument(
        "--rate",
        type=float,
        help="Open loop: offer this many requests per second (cycles of 12 arriving at random "
        "times) instead of a closed loop of --users.",
    )
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="Extra environment for the service (e.g. FEDLOAD_ACCESS_LOG=true).",
    )
    parser.add_argument("--json", type=Path, default=Path(__file__).with_name("results.json"))
    parser.add_argument(
        "--service-root",
        type=Path,
        action="append",
        default=[],
        help="Run the service from this checkout (e.g. main's, for a before/after pair driven "
        "by the same generator); repeat to alternate checkouts, one run each per worker count.",
    )
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.env)
    results = []
    roots: list[Path | None] = [root.resolve() for root in args.service_root] or [None]
    for workers in args.workers:
        for root in roots:
            row = measure(workers, args.users, args.seconds, args.warmup, env, root, rate=args.rate)
            row["service_root"] = str(root or Path.cwd())
            results.append(row)
            print(json.dumps(row), flush=True)
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
