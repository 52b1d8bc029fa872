"""The request's dependencies: the session is declared once per route, and the caller's
dependency still works in the endpoint's own session.

FastAPI solves a declared dependency's parameters wherever it is declared, even when its value
comes from the request's cache: the caller (``BearerPrincipal``) declaring the session too cost
a fifth of solving a read's dependencies (``bench/api/README.md``, session 24)."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from app.audit.subjects import KNOWN_ACTORS
from app.auth.dependencies import CurrentPrincipal, SessionDep, get_session
from app.auth.key_cache import KeyCache
from app.auth.keys import hash_api_key
from app.auth.principal import Principal
from app.main import create_app
from app.settings import Settings


def _declared(dependant: Dependant, call: object) -> int:
    return int(dependant.call is call) + sum(_declared(d, call) for d in dependant.dependencies)


def test_every_route_declares_the_session_at_most_once(tmp_path: Path) -> None:
    app = create_app(
        Settings(database_url=f"sqlite:///{tmp_path}/r.db", admin_key="k", environment="test")
    )
    counts = {
        f"{r.path}{sorted(r.methods or ())}": _declared(r.dependant, get_session)
        for r in iter_route_contexts(app.router.routes)
        if isinstance(getattr(r, "dependant", None), Dependant)
    }
    assert counts["/v1/contracts/{contract_id}['GET']"] == 1
    assert counts["/v1/contracts['GET']"] == 1
    assert counts["/v1/offers['GET']"] == 1
    assert max(counts.values()) == 1, {k: v for k, v in counts.items() if v > 1}


def test_the_caller_is_remembered_in_the_endpoints_session(tmp_path: Path) -> None:
    """``BearerPrincipal`` opens the request's session itself (``request_session``): the one
    the endpoint then receives, with the caller remembered in it for the audit log."""
    app = FastAPI()
    app.state.settings = Settings(
        database_url=f"sqlite:///{tmp_path}/r.db", admin_key="k", environment="test"
    )
    app.state.session_factory = sessionmaker(bind=create_engine(f"sqlite:///{tmp_path}/r.db"))
    app.state.key_cache = KeyCache(60)
    app.state.key_cache.put(hash_api_key("pa-key"), Principal(participant_id=7, name="pa"))
    seen: list[object] = []

    @app.get("/who")
    async def who(me: CurrentPrincipal, session: SessionDep) -> dict[str, object]:
        seen.append(session)
        return {"name": me.name, "known": dict(session.info.get(KNOWN_ACTORS, {}))}

    with TestClient(app) as client:
        first = client.get("/who", headers={"Authorization": "Bearer pa-key"})
        second = client.get("/who", headers={"Authorization": "Bearer pa-key"})
    assert first.status_code == 200, first.text
    assert first.json() == {"name": "pa", "known": {Principal(7, "pa").actor: 7}}
    assert second.json() == first.json()
    assert len(seen) == 2 and seen[0] is not seen[1]  # one session per request
