"""FastAPI dependencies: the request's DB session and the authenticated caller."""

from __future__ import annotations

import functools
from contextlib import AsyncExitStack
from typing import Annotated

import anyio
from fastapi import Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPBearer
from fastapi.security.utils import get_authorization_scheme_param
from sqlalchemy.orm import Session

from app.audit.subjects import remember_actor
from app.auth.key_cache import KeyCache
from app.auth.keys import admin_for_key, hash_api_key
from app.auth.principal import Principal, admin_named
from app.db.base import utcnow
from app.db.session import reading_session
from app.errors import Forbidden, Unauthorized
from app.models import Participant, ParticipantStatus
from app.participants import repository as participants
from app.settings import Settings

# The light dependencies are coroutines: FastAPI runs a sync one on a worker thread, and a
# thread hop costs more CPU than they do (bench/api/README.md). Only database work goes to a
# thread, once per request where it can.


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def get_session(request: Request) -> Session:
    """One session per request, committed once at the edge; services only flush.

    Opening a session touches no connection, so it happens on the event loop. A sync endpoint
    of the API's routers commits (or rolls back) on its own worker thread as it returns
    (``app/api_route.py``), and the session is only closed here. Otherwise the commit (or the
    rollback) and the connection's return go to a thread here, shielded so that a cancelled
    request still gives its connection back to the pool.

    A coroutine that pushes its own exit on the endpoint's exit stack (the one FastAPI ends a
    ``scope="function"`` generator dependency on, before the response is sent) rather than
    a generator: FastAPI wraps a generator dependency in an async context manager and a
    cancel scope of its own, a fifth of solving a request's dependencies
    (``bench/api/README.md``)."""
    return request_session(request)


# request.scope: the request's session once opened (every Request of one request shares it).
_SESSION = "fedload.session"


def request_session(request: Request) -> Session:
    """The request's session (``get_session``), opened at the first ask.

    For the dependencies that need the session only now and then: the caller's
    (``BearerPrincipal``) gets it here rather than as a dependency of its own, since FastAPI
    solves a sub-dependency's parameters (path, query, header, cookie) again wherever it is
    declared, even when its value is cached: a fifth of solving a read's dependencies went to
    the session's second declaration (``bench/api/README.md``, session 24)."""
    session: Session | None = request.scope.get(_SESSION)
    if session is not None:
        return session
    factory = request.app.state.session_factory
    # A GET of the API's routers reads outside a transaction until it needs one (PostgreSQL).
    reads = getattr(request.app.state, "autocommit_reads", None)
    route = request.scope.get("route")
    session = (
        reading_session(factory, reads)
        if reads is not None and getattr(route, "reads_first", False)
        else factory()
    )
    stack: AsyncExitStack = request.scope["fastapi_function_astack"]
    stack.push_async_exit(functools.partial(_exit, session))
    request.scope[_SESSION] = session
    return session


async def _exit(session: Session, exc_type: type[BaseException] | None, *_: object) -> bool:
    # Commit unless the request failed; False: an exception goes on to its handlers.
    await _finish(session, commit=exc_type is None)
    return False


async def _finish(session: Session, *, commit: bool) -> None:
    if not session.in_transaction():  # it never used a connection: nothing to wait for
        session.close()
        return
    with anyio.CancelScope(shield=True):
        await run_in_threadpool(_close, session, commit=commit)


def _close(session: Session, *, commit: bool) -> None:
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
# scope="function": the commit happens before the response is sent, so a failed commit is
# reported to the client instead of arriving after a 200.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


class BearerPrincipal(HTTPBearer):
    """The caller, from its bearer token: a participant's API key or the admin key.

    One dependency where there were two (FastAPI's ``HTTPBearer`` for the header, and this for
    the caller): every request authenticates, and each dependency FastAPI solves costs more
    CPU than reading the header (``bench/api/README.md``). Being an ``HTTPBearer`` still, it is
    published in the OpenAPI document as before (the ``HTTPBearer`` scheme)."""

    async def __call__(self, request: Request) -> Principal:  # type: ignore[override]
        scheme, token = get_authorization_scheme_param(request.headers.get("Authorization"))
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized(
                "missing bearer token: send 'Authorization: Bearer <API key>'",
                field="Authorization",
            )
        # The settings straight from the application, not as a dependency of their own.
        settings: Settings = request.app.state.settings
        cache = _key_cache(request)
        principal = _known(token, settings, cache)
        if principal is None:  # a query: on a thread
            principal = await run_in_threadpool(
                _authenticate, token, settings, request_session(request), cache
            )
        if principal.participant_id is not None:
            # The caller's audit entries are about it: sealing them needs no lookup of its name.
            remember_actor(request_session(request), principal.actor, principal.participant_id)
        # For the request log (app/observability): who asked, by name.
        request.state.principal = principal
        return principal


current_principal = BearerPrincipal(
    scheme_name="HTTPBearer",
    description="A participant's API key or the admin key.",
    auto_error=False,
)


def _known(token: str, settings: Settings, cache: KeyCache | None) -> Principal | None:
    """The caller when no query is needed: an admin key, or a participant's key verified a
    moment ago (a SHA-256 and two dictionary lookups, fine on the event loop)."""
    admin = admin_for_key(token, settings.admins)
    if admin is not None:
        return admin_named(admin)
    return cache.get(hash_api_key(token)) if cache is not None else None


def _key_cache(request: Request) -> KeyCache | None:
    cache = getattr(request.app.state, "key_cache", None)
    return cache if isinstance(cache, KeyCache) else None


def _authenticate(
    token: str, settings: Settings, session: Session, cache: KeyCache | None = None
) -> Principal:
    known = _known(token, settings, cache)
    if known is not None:
        return known
    key_hash = hash_api_key(token)
    by_previous_key = False
    participant = participants.get_by_key_hash(session, key_hash)
    if participant is None:
        participant = participants.get_by_previous_key_hash(session, key_hash, utcnow())
        by_previous_key = participant is not None
    if participant is None:
        raise Unauthorized("unknown API key", field="Authorization")
    if participant.status is ParticipantStatus.suspended:
        raise Forbidden(f"participant {participant.name} is suspended", field="Authorization")
    principal = Principal(
        participant_id=participant.id, name=participant.name, by_previous_key=by_previous_key
    )
    if cache is not None:
        cache.put(key_hash, principal)
    return principal


CurrentPrincipal = Annotated[Principal, Depends(current_principal)]


async def current_participant(principal: CurrentPrincipal, request: Request) -> Participant:
    # The session from the request rather than declared (``request_session``); the lookup on
    # a thread, as FastAPI ran the whole of this dependency when it was a plain function.
    if principal.participant_id is None:
        raise Forbidden("this endpoint is for participants; the admin key has no participant")
    session = request_session(request)
    participant = await run_in_threadpool(session.get, Participant, principal.participant_id)
    assert participant is not None  # authenticated a moment ago in the same transaction
    return participant


async def require_admin(principal: CurrentPrincipal) -> Principal:
    if not principal.is_admin:
        raise Forbidden("admin key required", field="Authorization")
    return principal


CurrentParticipant = Annotated[Participant, Depends(current_participant)]
AdminPrincipal = Annotated[Principal, Depends(require_admin)]
