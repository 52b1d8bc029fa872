"""The API's route class: a sync endpoint still runs off the event loop, its return value is
still checked against the response model, and what FastAPI publishes about it is unchanged."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
from fastapi import APIRouter, FastAPI
from pydantic import BaseModel

from app.api_route import api_router


class Thing(BaseModel):
    name: str
    thread: str


def _app(router: APIRouter) -> FastAPI:
    @router.get("/slow", response_model=Thing)
    def slow(name: str) -> Thing:
        """Blocks its thread, as a database round trip does."""
        time.sleep(0.3)
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


async def _calls(app: FastAPI) -> tuple[httpx.Response, httpx.Response, float, httpx.Response]:
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        slow = asyncio.create_task(client.get("/slow", params={"name": "x"}))
        await asyncio.sleep(0.05)
        started = time.perf_counter()
        fast = await client.get("/fast")
        waited = time.perf_counter() - started
        return await slow, fast, waited, await client.get("/wrong")


def test_a_sync_endpoint_runs_on_a_worker_thread_and_its_answer_is_checked() -> None:
    slow, fast, waited, wrong = asyncio.run(_calls(_app(api_router())))
    loop_thread = threading.current_thread().name
    assert slow.status_code == 200 and slow.json()["name"] == "x"
    assert slow.json()["thread"] != loop_thread and fast.json()["thread"] != loop_thread
    # The slow endpoint's thread blocked, the event loop did not: the other request went on.
    assert waited < 0.25
    assert wrong.status_code == 500  # an answer that does not fit the model is still refused


def test_the_published_operation_is_the_one_written() -> None:
    plain = _app(APIRouter()).openapi()
    threaded = _app(api_router()).openapi()
    assert threaded == plain
    operation = threaded["paths"]["/slow"]["get"]
    assert operation["description"] == "Blocks its thread, as a database round trip does."
    assert [p["name"] for p in operation["parameters"]] == ["name"]
