"""The API's route class: a sync endpoint still runs off the event loop, its return value is
still checked against the response model, and what FastAPI publishes about it is unchanged."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel

from app.api_route import api_router


class Thing(BaseModel):
    name: str
    thread: str


def _app(router: APIRouter, release: threading.Event | None = None) -> FastAPI:
    @router.get("/slow", response_model=Thing)
    def slow(name: str) -> Thing:
        """Blocks its thread, as a database round trip does."""
        if release is not None:
            release.wait(30)
        return Thing(name=name, thread=threading.current_thread().name)

    @router.get("/fast", response_model=Thing)
    def fast() -> Thing:
        return Thing(name="fast", thread=threading.current_thread().name)

    @router.get("/wrong", response_model=Thing)
    def wrong() -> object:
        return {"name": 3}

    app = FastAPI()
    app.include_router(router)
    return app


async def _calls(
    app: FastAPI, release: threading.Event
) -> tuple[httpx.Response, httpx.Response, bool, httpx.Response, str]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        slow = asyncio.create_task(client.get("/slow", params={"name": "x"}))
        await asyncio.sleep(0.05)
        fast = await client.get("/fast")
        # The slow endpoint still blocks its thread (until released): the loop went on.
        slow_was_blocked = not slow.done()
        release.set()
        loop_thread = threading.current_thread().name
        return await slow, fast, slow_was_blocked, await client.get("/wrong"), loop_thread


def test_a_sync_endpoint_runs_on_a_worker_thread_and_its_answer_is_checked() -> None:
    release = threading.Event()
    # A loop of its own on a thread of its own: other tests may leave one running on this one.
    with ThreadPoolExecutor(1) as pool:
        answer = pool.submit(asyncio.run, _calls(_app(api_router(), release), release)).result()
    slow, fast, slow_was_blocked, wrong, loop_thread = answer
    assert slow.status_code == 200 and slow.json()["name"] == "x"
    assert slow.json()["thread"] != loop_thread and fast.json()["thread"] != loop_thread
    assert slow_was_blocked
    assert wrong.status_code == 500  # an answer that does not fit the model is still refused


def test_the_published_operation_is_the_one_written() -> None:
    plain = _app(APIRouter()).openapi()
    threaded = _app(api_router()).openapi()
    assert threaded == plain
    operation = threaded["paths"]["/slow"]["get"]
    assert operation["description"] == "Blocks its thread, as a database round trip does."
    assert [p["name"] for p in operation["parameters"]] == ["name"]
