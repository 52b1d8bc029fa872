"""The REST API's routes: a sync endpoint runs on a worker thread in one hop, nothing more.

FastAPI runs a plain ``def`` endpoint on a worker thread, and then validates its return value
on a worker thread too, in a second hop (``fastapi.routing.serialize_response``). A hop is a
hand-off to another thread and back through the event loop, which costs more CPU than
validating a model the service built itself (``bench/api/README.md``). ``ThreadedRoute`` wraps
such an endpoint in a coroutine that runs it on a thread: FastAPI then treats it as async and
checks the returned model on the event loop, where it is already.

The wrapped endpoint keeps its signature, name, docstring and annotations (``functools.wraps``
and FastAPI's ``inspect.unwrap``), so its parameters, dependencies, OpenAPI operation and
response model are exactly those of the function as written.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute


def on_a_thread(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` (a plain function) as a coroutine function running it on a worker thread."""

    @functools.wraps(endpoint)
    async def threaded(*args: Any, **kwargs: Any) -> Any:
        return await run_in_threadpool(endpoint, *args, **kwargs)

    return threaded


class ThreadedRoute(APIRoute):
    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        if not inspect.iscoroutinefunction(endpoint) and inspect.isfunction(endpoint):
            endpoint = on_a_thread(endpoint)
        super().__init__(path, endpoint, **kwargs)


def api_router(**kwargs: Any) -> APIRouter:
    """An ``APIRouter`` whose sync endpoints run as ``ThreadedRoute``s."""
    return APIRouter(route_class=ThreadedRoute, **kwargs)
