"""The REST API's routes: a sync endpoint runs on a worker thread in one hop, nothing more.

FastAPI runs a plain ``def`` endpoint on a worker thread, and then validates its return value
on a worker thread too, in a second hop (``fastapi.routing.serialize_response``). A hop is a
hand-off to another thread and back through the event loop, which costs more CPU than
validating a model the service built itself (``bench/api/README.md``). ``ThreadedRoute`` wraps
such an endpoint in a coroutine that runs it on a thread: FastAPI then treats it as async and
checks the returned model on the event loop, where it is already.

The request's session (``app.auth.dependencies.get_session``) is committed on that same
thread, right after the endpoint returns, or rolled back there if it raised: the commit is a
round trip, and doing it in the session dependency's exit took a second hop. What the client
is told is unchanged: a commit that fails (a uniqueness race, a stale version, a lost
database) raises from the endpoint, before any response exists, and goes to the same
exception handlers. The endpoint has built its answer by then (the services' ``to_read``);
what remains on the loop is FastAPI's check of the returned model and its serialisation.

The wrapped endpoint keeps its signature, name, docstring and annotations (``functools.wraps``
and FastAPI's ``inspect.unwrap``), so its parameters, dependencies, OpenAPI operation and
response model are exactly those of the function as written.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.routing import APIRoute
from sqlalchemy.orm import Session
from starlette._utils import get_route_path
from starlette.routing import Match
from starlette.types import Scope

from app.db.session import TRANSACTION_BIND, NeedsTransaction, in_transaction_from_now


def finish_after(
    endpoint: Callable[..., Any], session: Session, args: Any, kwargs: dict[str, Any]
) -> Any:
    """Run ``endpoint``, then commit ``session`` (or roll it back if either step raised).

    A GET's session starts outside a transaction (``app.db.session.autocommit_reads``): should
    the endpoint, or its commit, need to write (a contract found past its term is expired by
    the read that finds it), the work is done again from the start, in a transaction. The
    answer's headers are those of the second run only."""
    if TRANSACTION_BIND not in session.info:
        return _run_and_commit(endpoint, session, args, kwargs)
    response = _response_in(kwargs)
    headers = None if response is None else (list(response.raw_headers), response.status_code)
    try:
        return _run_and_commit(endpoint, session, args, kwargs)
    except NeedsTransaction:
        if not in_transaction_from_now(session):
            raise
    if response is not None and headers is not None:
        response.raw_headers, response.status_code = headers[0], headers[1]
    return _run_and_commit(endpoint, session, args, kwargs)


def _run_and_commit(
    endpoint: Callable[..., Any], session: Session, args: Any, kwargs: dict[str, Any]
) -> Any:
    try:
        result = endpoint(*args, **kwargs)
        if session.in_transaction():  # a session that touched no connection has nothing to end
            session.commit()
        return result
    except BaseException:
        if session.in_transaction():
            session.rollback()
        raise


def _session_in(kwargs: dict[str, Any]) -> Session | None:
    # The request's session is the only Session among an endpoint's arguments (SessionDep).
    for value in kwargs.values():
        if isinstance(value, Session):
            return value
    return None


def _response_in(kwargs: dict[str, Any]) -> Response | None:
    # The response FastAPI hands an endpoint that asks for one, to set headers on.
    for value in kwargs.values():
        if isinstance(value, Response):
            return value
    return None


def on_a_thread(endpoint: Callable[..., Any]) -> Callable[..., Any]:
    """``endpoint`` (a plain function) as a coroutine function running it on a worker thread,
    and ending the request's transaction there too."""

    @functools.wraps(endpoint)
    async def threaded(*args: Any, **kwargs: Any) -> Any:
        session = _session_in(kwargs)
        if session is None:
            return await run_in_threadpool(endpoint, *args, **kwargs)
        return await run_in_threadpool(finish_after, endpoint, session, args, kwargs)

    return threaded


class ThreadedRoute(APIRoute):
    # Its requests' sessions start outside a transaction (``app.auth.dependencies``): a GET
    # run by ``finish_after``, which redoes it in a transaction should it need one.
    reads_first: bool = False

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        threaded = not inspect.iscoroutinefunction(endpoint) and inspect.isfunction(endpoint)
        if threaded:
            endpoint = on_a_thread(endpoint)
        super().__init__(path, endpoint, **kwargs)
        self.reads_first = threaded and (self.methods or set()) <= {"GET", "HEAD"}


class PrefixRouter(APIRouter):
    """An ``APIRouter`` that is no candidate for a path outside its prefix.

    FastAPI finds a request's route by asking every included router in turn, and a router
    answers by trying each of its routes (twice: once to choose the router, once to run the
    route), whatever its prefix: a request to ``/v1/offers`` paid for trying every participant,
    contract and task route first (``bench/api/README.md``). Every ``/v1`` router has a prefix
    of its own and is included at the application's root, so a path that does not start with
    the prefix cannot be one of its routes."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if not get_route_path(scope).startswith(self.prefix):
            return Match.NONE, {}
        return super().matches(scope)


def api_router(**kwargs: Any) -> APIRouter:
    """An ``APIRouter`` whose sync endpoints run as ``ThreadedRoute``s, tried only for the
    paths under its prefix."""
    return PrefixRouter(route_class=ThreadedRoute, **kwargs)
