"""Where one request's CPU goes: ``python -m bench.api.cpu_profile [--cycles 200] [--top 40]``.

The benchmark's cycle (``bench/api/run.py``: propose, get, list, counter, get, list offers,
accept, get, list, list offers, terminate, get) replayed by one user, in this process, against
the application on a fresh PostgreSQL database, under cProfile. Sync endpoints and dependencies
normally run on worker threads, which cProfile does not follow; here they run inline on the
event loop's thread (one user, one request at a time, so nothing waits on a lock another
request holds), so the profile sees every line of a request. HTTP parsing (uvicorn) is not in
it: the requests enter through httpx's ASGI transport.

Prints CPU ms per request for the whole loop and for the application alone (the CPU time spent
inside its ASGI call, which excludes the client), and the top functions by own and cumulative
time.
A profile, not a benchmark: cProfile slows Python code down, more so the code with many small
calls, so compare shares, and compare runs of this script with one another.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import os
import pstats
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx
from sqlalchemy import event
from sqlalchemy.engine import Engine

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import Settings
from bench.api.run import fresh_database

ADMIN = {"Authorization": "Bearer bench-admin-key"}


async def _inline(func: Callable[..., Any], *args: Any, **_: Any) -> Any:
    return func(*args)


async def _cycle(client: httpx.AsyncClient, a: dict[str, str], b: dict[str, str]) -> int:
    """One negotiation; returns the number of requests it sent."""

    async def call(method: str, path: str, headers: dict[str, str], body: Any, ok: int) -> Any:
        reply = await client.request(method, path, headers=headers, json=body)
        assert reply.status_code == ok, (method, path, reply.status_code, reply.text)
        return reply.json()

    made = await call(
        "POST", "/v1/contracts", a, {"partner": "pb", "price_min": 0.8, "price_max": 1.0}, 201
    )
    path = f"/v1/contracts/{made['id']}"
    await call("GET", path, b, None, 200)
    await call("GET", "/v1/contracts?limit=20", a, None, 200)
    await call("POST", f"{path}/counter", b, {"version": 1, "price_min": 0.9}, 200)
    await call("GET", path, a, None, 200)
    await call("GET", "/v1/offers?limit=20", b, None, 200)
    await call("POST", f"{path}/accept", a, {"version": 2}, 200)
    await call("GET", path, b, None, 200)
    await call("GET", "/v1/contracts?limit=20&status=active", b, None, 200)
    await call("GET", "/v1/offers?limit=20", a, None, 200)
    await call("POST", f"{path}/terminate", a, {"version": 3}, 200)
    await call("GET", path, a, None, 200)
    return 12


class _Timed:
    """The application, with the CPU time spent inside it added up: one request at a time and
    the endpoints inline, so this is the service's own CPU, without the client's."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cpu = 0.0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = time.thread_time()
        try:
            await self.app(scope, receive, send)
        finally:
            self.cpu += time.thread_time() - started


async def _run(url: str, cycles: int, profile: cProfile.Profile | None) -> tuple[int, float, float]:
    settings = Settings(
        database_url=url, admin_key="bench-admin-key", environment="test", log_format="json"
    )
    app = _Timed(create_app(settings))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        keys = {}
        for name in ("pa", "pb"):
            made = await client.post(
                "/v1/participants", json={"name": name, "capacity": 100}, headers=ADMIN
            )
            keys[name] = {"Authorization": f"Bearer {made.json()['api_key']}"}
        for _ in range(10):  # warm-up: imports, caches, the pool's connections
            await _cycle(client, keys["pa"], keys["pb"])
        sent = 0
        cpu = time.process_time()
        app.cpu = 0.0
        if profile is not None:
            profile.enable()
        for _ in range(cycles):
            sent += await _cycle(client, keys["pa"], keys["pb"])
        if profile is not None:
            profile.disable()
        return sent, time.process_time() - cpu, app.cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--no-profile", action="store_true", help="CPU ms per request only.")
    parser.add_argument("--out", type=Path, help="Also write the raw profile here (pstats).")
    parser.add_argument(
        "--statements", action="store_true", help="Count the SQL statements sent, by kind."
    )
    args = parser.parse_args(argv)
    statements: Counter[str] = Counter()
    if args.statements:

        @event.listens_for(Engine, "before_cursor_execute")
        def _count(_conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
            statements[" ".join(sql.split())[:110]] += 1

    anyio.to_thread.run_sync = _inline  # type: ignore[assignment]
    # The request log's JSON lines cost what they cost in production; they go nowhere here.
    sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    # CPU time, not wall time: waits on PostgreSQL are not the service's CPU.
    profile = None if args.no_profile else cProfile.Profile(time.process_time)
    with fresh_database() as url:
        upgrade(url)
        sent, cpu, app_cpu = asyncio.run(_run(url, args.cycles, profile))
    print(
        f"{sent} requests, {1000 * cpu / sent:.2f} CPU ms per request (client included), "
        f"{1000 * app_cpu / sent:.2f} in the application"
    )
    if statements:
        total = sum(statements.values())
        print(f"{total / sent:.2f} statements per request (warm-up and seeding included)")
        for sql, n in statements.most_common():
            print(f"{n:7d}  {sql}")
    if profile is not None:
        if args.out:
            profile.dump_stats(args.out)
        for order in ("tottime", "cumulative"):
            text = io.StringIO()
            stats = pstats.Stats(profile, stream=text).strip_dirs().sort_stats(order)
            stats.print_stats(args.top)
            print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
