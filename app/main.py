"""The FastAPI application: REST API v1 under /v1, OpenAPI at /docs, admin UI at /admin."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.orm.exc import StaleDataError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import __version__
from app.admin.web import mount_admin
from app.api_docs import mount_docs
from app.audit.endpoints import router as audit_router
from app.auth.key_cache import SESSION_INFO_KEY as KEY_CACHE_INFO
from app.auth.key_cache import KeyCache
from app.contracts.endpoints import router as contracts_router
from app.dataplane.endpoints import router as dataplane_router
from app.dataplane.service import SigningKey
from app.db.integrity import conflict_for
from app.db.session import autocommit_reads, check_database, session_factory
from app.errors import DomainError, validation_body
from app.movements.endpoints import router as movements_router
from app.movements.replica_endpoints import router as replicas_router
from app.movements.sweeper import StaleMovementSweeper
from app.observability import install as install_observability
from app.offers.endpoints import router as offers_router
from app.openapi import publish_error_responses
from app.openapi_examples import install_examples
from app.overload import install as install_overload_protection
from app.overload import unavailable
from app.participants.endpoints import router as participants_router
from app.participants.inbox import HeartbeatArrivals, HeartbeatInbox, loop_watch
from app.participants.name_cache import SESSION_INFO_KEY as NAME_CACHE_INFO
from app.participants.name_cache import NameCache
from app.participants.sweeper import FailureSweeper
from app.permits.endpoints import router as permits_router
from app.request_limits import RequestLimits
from app.settings import Settings, get_settings
from app.tasks.endpoints import router as tasks_router


def _field(loc: tuple[Any, ...] | list[Any]) -> str:
    # "body" / "query" prefixes say where, the rest says which field.
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        where, rest = parts[0], parts[1:]
        if not rest:
            return where
        return ".".join(rest) if where == "body" else ".".join([where, *rest])
    return ".".join(parts)


def _validation_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    first: dict[str, Any] = (
        dict(errors[0]) if errors else {"loc": ("body",), "msg": "invalid request", "type": ""}
    )
    if first.get("type") == "json_invalid":
        ctx = first.get("ctx", {})
        return JSONResponse(
            status_code=400,
            content={
                "detail": f"malformed JSON body: {ctx.get('error', first.get('msg'))} "
                f"at position {first['loc'][-1] if len(first['loc']) > 1 else '?'}",
                "field": "body",
            },
        )
    listed = errors or [first]
    return JSONResponse(
        status_code=422,
        content=validation_body(
            [(_field(e["loc"]), str(e["msg"]).removeprefix("Value error, ")) for e in listed]
        ),
    )


def _domain_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, DomainError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    return JSONResponse(
        status_code=exc.status_code,
        content={"detail": exc.detail, "field": exc.field},
        headers=headers,
    )


def _stale(_: Request, exc: Exception) -> JSONResponse:
    # Another request changed the row between our read and our write (optimistic lock).
    return JSONResponse(
        status_code=409,
        content={
            "detail": "the record changed concurrently; re-read it and retry",
            "field": "version",
        },
    )


def _allowed_methods(request: Request) -> list[str]:
    # Starlette's 405 names the methods of the first route whose path matched; a path served
    # by several routes (GET and PATCH /v1/tasks/{name}) must name them all. The published
    # paths are the routes' own, so they are what a client may use.
    methods: set[str] = set()
    for template, operations in request.app.openapi().get("paths", {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template))
        if re.fullmatch(pattern, request.url.path):
            methods |= {method.upper() for method in operations}
    return sorted(methods)


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    """Routing errors (unknown path, wrong method) in the same shape as every other error."""
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers or {})
    detail, field = str(exc.detail), None
    if exc.status_code == 405:
        allowed = _allowed_methods(request)
        headers["Allow"] = ", ".join(allowed)
        detail = f"{request.method} is not allowed on {request.url.path}; use {', '.join(allowed)}"
        field = "method"
    return JSONResponse(
        status_code=exc.status_code, content={"detail": detail, "field": field}, headers=headers
    )


def _integrity(_: Request, exc: Exception) -> JSONResponse:
    # A uniqueness rule the database enforces, lost to a concurrent request between the
    # service's own check and the insert: the same 409 the check gives. Anything else is a bug.
    assert isinstance(exc, IntegrityError)
    conflict = conflict_for(exc)
    if conflict is None:
        raise exc
    return _domain_error(_, conflict)


def _data_error(_: Request, exc: Exception) -> JSONResponse:
    # The last line of defence behind the schemas' bounds: a value the database refused.
    assert isinstance(exc, DataError)
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig else "invalid value"
    return JSONResponse(
        status_code=422,
        content=validation_body([("body", f"the database refused a value: {reason}")]),
    )


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """While the service runs, background threads abort prepared movements past their lease
    and declare participants failed (and fence them) when a heartbeat window closes unanswered;
    a task on the event loop keeps the heartbeat inbox's horizon (app.participants.inbox)."""
    settings: Settings = app.state.settings
    sweeper = StaleMovementSweeper(app.state.session_factory, settings.movement_lease_seconds)
    failures = FailureSweeper(
        app.state.session_factory,
        app.state.heartbeat_inbox,
        interval_seconds=settings.heartbeat_interval_seconds,
        misses=settings.heartbeat_misses,
        every=settings.failure_sweep_interval_seconds,
    )
    app.state.movement_sweeper = sweeper
    app.state.failure_sweeper = failures
    watch = asyncio.create_task(
        loop_watch(app.state.heartbeat_inbox, settings.failure_sweep_interval_seconds / 4)
    )
    sweeper.start()
    failures.start()
    try:
        yield
    finally:
        watch.cancel()
        # Off the event loop: a round in progress may wait on the database for a moment.
        await asyncio.to_thread(sweeper.stop)
        await asyncio.to_thread(failures.stop)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(
        title="fedload",
        version=__version__,
        summary=(
            "Federated load management: bilateral, price-bounded contracts between participants."
        ),
        lifespan=_lifespan,
        docs_url=None,  # served by mount_docs, with local assets
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.session_factory = session_factory(settings.database_url, settings.database_options())
    # GETs read outside a transaction on PostgreSQL: no BEGIN and COMMIT round trips.
    app.state.autocommit_reads = autocommit_reads(
        settings.database_url, settings.read_database_options()
    )
    # Per worker: verified keys and participant names. The sessions carry both, so that a
    # commit changing a participant's status or keys empties the first (app/auth/key_cache.py)
    # and only committed names enter the second (app/participants/name_cache.py).
    app.state.key_cache = KeyCache(settings.key_cache_seconds)
    app.state.session_factory.configure(
        info={KEY_CACHE_INFO: app.state.key_cache, NAME_CACHE_INFO: NameCache()}
    )
    production = settings.environment == "production"
    app.state.dataplane_key = SigningKey(settings.dataplane_key_path, create=not production)
    if production:
        app.state.dataplane_key.get()  # a missing or bad key stops the start, naming the file
    install_overload_protection(app, settings)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(DomainError, _domain_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(StaleDataError, _stale)
    app.add_exception_handler(IntegrityError, _integrity)
    app.add_exception_handler(DataError, _data_error)
    app.add_middleware(RequestLimits, max_body_bytes=settings.max_body_bytes)
    app.include_router(participants_router)
    app.include_router(contracts_router)
    app.include_router(tasks_router)
    app.include_router(offers_router)
    app.include_router(movements_router)
    app.include_router(replicas_router)
    app.include_router(permits_router)
    app.include_router(audit_router)
    app.include_router(dataplane_router)
    install_observability(app, settings)  # request ids, request logs, /metrics

    @app.get("/healthz", tags=["service"])
    def healthz() -> dict[str, str]:
        return {"status": "ok", "version": __version__}

    @app.get("/readyz", tags=["service"], responses={503: {"description": "Database unusable."}})
    def readyz() -> Any:
        """Ready to serve: the database answers a query (``/healthz`` is liveness only)."""
        try:
            check_database(settings.database_url, settings.database_options())
        except Exception as exc:
            return unavailable(f"database: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        return {"status": "ready", "version": __version__}

    mount_admin(app, settings)
    mount_docs(app)
    # Outermost (added last): a heartbeat is stamped as it arrives, before it waits for an
    # admission slot, a thread or its transaction, and the failure sweeper sees it in flight.
    app.state.heartbeat_inbox = HeartbeatInbox()
    app.add_middleware(HeartbeatArrivals, inbox=app.state.heartbeat_inbox)
    publish_error_responses(app)
    install_examples(app)  # after: it adds examples to the published document, errors included
    return app
