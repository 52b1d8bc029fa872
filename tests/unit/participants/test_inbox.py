"""The registry's heartbeat inbox: a heartbeat in flight, or an event loop behind, holds the
horizon up to which the failure sweeper may count a window as missed."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from app.participants.inbox import (
    HEARTBEAT_PATH,
    HeartbeatArrivals,
    HeartbeatInbox,
    loop_watch,
)
from tests.support.event_loop import run_coroutine


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_oldest_heartbeat_in_flight_bounds_the_horizon() -> None:
    clock = Clock()
    inbox = HeartbeatInbox(clock)
    assert inbox.checked_until() == 100.0
    first, _ = inbox.arrived()
    clock.now = 101.0
    second, _ = inbox.arrived()
    clock.now = 105.0
    assert inbox.checked_until() == 100.0 and inbox.in_flight() == 2
    inbox.done(first)
    assert inbox.checked_until() == 101.0
    inbox.done(second)
    assert inbox.checked_until() == 105.0


def test_an_event_loop_behind_holds_the_horizon_back() -> None:
    clock = Clock()
    inbox = HeartbeatInbox(clock)
    inbox.loop_checked(98.0)
    clock.now = 110.0
    assert inbox.checked_until() == 98.0


def test_the_middleware_holds_heartbeats_in_flight_until_answered() -> None:
    clock = Clock()
    inbox = HeartbeatInbox(clock)
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.setdefault("in_flight", []).append(inbox.in_flight())
        seen.setdefault("horizon", []).append(inbox.checked_until())
        clock.now += 1.0  # the request takes a second; the horizon stays at its arrival

    async def call(path: str, method: str = "POST") -> None:
        scope = {"type": "http", "method": method, "path": path}
        await HeartbeatArrivals(app, inbox)(scope, None, None)

    run_coroutine(call(HEARTBEAT_PATH))
    assert seen["in_flight"] == [1] and inbox.in_flight() == 0
    assert inbox.checked_until() == 101.0
    run_coroutine(call("/v1/participants/me"))
    run_coroutine(call(HEARTBEAT_PATH, method="GET"))
    assert seen["in_flight"] == [1, 0, 0]


def test_the_loop_watch_advances_the_horizon_while_the_loop_runs() -> None:
    inbox = HeartbeatInbox()

    async def run() -> None:
        watch = asyncio.create_task(loop_watch(inbox, 0.01))
        await asyncio.sleep(0.05)
        watch.cancel()

    before = time.time()
    run_coroutine(run())
    # The horizon is the last round's stamp: past the start, behind the clock (the loop stopped).
    horizon = inbox.checked_until()
    assert before <= horizon < time.time()
