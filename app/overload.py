"""Overload and database faults answered, never stalled (issue 15).

Three parts, sized together from the settings:

- an admission limit: at most ``max_concurrent_requests`` requests of a worker run at a time;
  the others wait up to ``request_queue_seconds`` and then get 503 with ``Retry-After``;
- the thread limiter that runs sync endpoints gets a thread for every admitted request, and the
  pool a connection for each (``Settings.database_options``), so an admitted request never
  waits for a thread while holding a connection or the other way round (the 30 s stalls);
- a database that is down, silent (connect and statement timeouts) or out of connections is a
  JSON 503 with ``Retry-After``, never a plain-text 500 or a hang.
"""

from __future__ import annotations

import asyncio

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.types import ASGIApp, Receive, Scope, Send

from app.settings import Settings

# Liveness must answer while every admitted request waits on a slow database.
UNLIMITED_PATHS = frozenset({"/healthz"})
# Threads for requests outside the limit (``/healthz``) and the admin UI's sync renderers.
SPARE_THREADS = 4
RETRY_AFTER_SECONDS = 1


def unavailable(detail: str, *, field: str | None = None) -> JSONResponse:
    return JSONResponse(
        status_code=503,
        content={"detail": detail, "field": field},
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


class AdmissionLimit:
    """Pure ASGI middleware: a semaphore of ``limit`` slots per event loop, a bounded wait."""

    def __init__(self, app: ASGIApp, *, limit: int, queue_seconds: float) -> None:
        self.app = app
        self.limit = limit
        self.queue_seconds = queue_seconds
        self._slots: asyncio.Semaphore | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            # A new event loop (each worker, each test client): fresh slots, sized threads.
            self._slots = asyncio.Semaphore(self.limit)
            anyio.to_thread.current_default_thread_limiter().total_tokens = (
                self.limit + SPARE_THREADS
            )
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http" or scope["path"] in UNLIMITED_PATHS:
            await self.app(scope, receive, send)
            return
        if self._slots is None:  # served without a lifespan (a bare TestClient)
            self._slots = asyncio.Semaphore(self.limit)
        try:
            if self._slots.locked():
                async with asyncio.timeout(self.queue_seconds):
                    await self._slots.acquire()
            else:
                # A free slot, and nobody waiting for one (``locked``): taken without waiting,
                # so nothing to time out. A timeout's set-up and cancellation cost more than
                # the rest of this middleware (``bench/api/README.md``, session 24).
                await self._slots.acquire()
        except TimeoutError:
            response = unavailable(
                f"the service is at capacity ({self.limit} requests in progress); "
                f"retry after {RETRY_AFTER_SECONDS} s"
            )
            await response(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()


def _pool_exhausted(_: Request, exc: Exception) -> JSONResponse:
    return unavailable(
        "no database connection became free in time; the service is overloaded, retry"
    )


def _database_fault(_: Request, exc: Exception) -> JSONResponse:
    # The driver's message names hosts and ports; the client only needs to know to retry.
    # SQLite's "database is locked" (busy timeout) and PostgreSQL's statement_timeout land here.
    return unavailable("the database is unavailable or did not answer in time; retry later")


def install(app: FastAPI, settings: Settings) -> None:
    app.add_middleware(
        AdmissionLimit,
        limit=settings.max_concurrent_requests,
        queue_seconds=settings.request_queue_seconds,
    )
    app.add_exception_handler(PoolTimeoutError, _pool_exhausted)
    app.add_exception_handler(OperationalError, _database_fault)
    app.add_exception_handler(InterfaceError, _database_fault)
