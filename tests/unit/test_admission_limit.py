"""The admission limit takes a free slot without setting up a timeout (a timeout's set-up and
cancellation were most of the middleware's CPU), and a request that finds no slot still waits
``queue_seconds`` at most and gets its 503."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app import overload
from app.overload import AdmissionLimit
from tests.support.event_loop import run_coroutine


def test_a_free_slot_is_taken_without_a_timeout_and_a_full_house_still_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timeouts: list[float | None] = []
    real_timeout = asyncio.timeout

    def counted(delay: float | None) -> asyncio.Timeout:
        timeouts.append(delay)
        return real_timeout(delay)

    monkeypatch.setattr(overload.asyncio, "timeout", counted)

    async def scenario() -> tuple[int, list[float | None], int, list[float | None], int]:
        release = asyncio.Event()

        async def app(scope: Any, _receive: Any, send: Any) -> None:
            if scope["path"] == "/hold":
                await release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})

        limit = AdmissionLimit(app, limit=1, queue_seconds=0.05)

        async def call(path: str) -> int:
            statuses: list[int] = []

            async def receive() -> dict[str, Any]:
                return {"type": "http.request", "body": b""}

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    statuses.append(message["status"])

            scope = {"type": "http", "method": "GET", "path": path, "headers": []}
            await limit(scope, receive, send)
            return statuses[0]

        free = await call("/free")
        after_free = list(timeouts)
        holder = asyncio.create_task(call("/hold"))
        await asyncio.sleep(0)  # the holder takes the only slot and waits
        late = await call("/late")
        after_late = list(timeouts)
        release.set()
        return free, after_free, late, after_late, await holder

    # On a thread of its own: the browser tests' Playwright leaves a loop running here.
    free, after_free, late, after_late, held = run_coroutine(scenario())
    assert (free, after_free) == (200, [])
    assert (late, after_late) == (503, [0.05])
    assert held == 200
