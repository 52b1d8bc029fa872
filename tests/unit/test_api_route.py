"""The API's route class: a sync endpoint still runs off the event loop, its return value is
still checked against the response model, what FastAPI publishes about it is unchanged, and the
request's session is committed (or rolled back) on the endpoint's own thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from pathlib import Path

import httpx
from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from pydantic import BaseModel
from sqlalchemy import create_engine, event, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from app.api_route import api_router
from app.auth.dependencies import SessionDep


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


class Base(DeclarativeBase):
    pass


class Note(Base):
    __tablename__ = "notes"
    id: Mapped[int] = mapped_column(primary_key=True)
    text: Mapped[str] = mapped_column(unique=True)


# Set by the endpoint. A worker thread runs each call in a copy of the event loop's context, so
# only what runs in the endpoint's own call (the same hop) sees the value it set.
_endpoint_call: ContextVar[str | None] = ContextVar("endpoint_call", default=None)


def _where() -> str:
    return f"{threading.current_thread().name} {_endpoint_call.get()}"


def _notes_app(tmp_path: Path, seen: dict[str, str]) -> FastAPI:
    """Notes in a SQLite file through the API's own session dependency; ``seen`` records the
    thread, and the endpoint's call, each step ran in."""
    engine = create_engine(f"sqlite:///{tmp_path / 'notes.db'}")
    Base.metadata.create_all(engine)
    sessions = sessionmaker(bind=engine, expire_on_commit=False)

    @event.listens_for(sessions, "after_commit")
    def _committed(_session: Session) -> None:
        seen["commit"] = _where()

    @event.listens_for(sessions, "after_soft_rollback")
    def _rolled_back(_session: Session, _previous: object) -> None:
        seen["rollback"] = _where()

    router = api_router()

    @router.post("/notes/{text}", status_code=201)
    def add(text: str, session: SessionDep, fail: bool = False) -> dict[str, str]:
        _endpoint_call.set(text)
        seen["endpoint"] = _where()
        session.add(Note(text=text))  # flushed, and refused if a duplicate, only by the commit
        if fail:
            raise ValueError("the endpoint failed after its write")
        return {"text": text}

    app = FastAPI()
    app.state.session_factory = sessions
    app.include_router(router)
    app.add_exception_handler(
        IntegrityError, lambda _r, _e: JSONResponse({"detail": "duplicate"}, status_code=409)
    )
    return app


def _texts(app: FastAPI) -> list[str]:
    with app.state.session_factory() as session:
        return sorted(session.scalars(select(Note.text)))


def test_the_session_commits_on_the_endpoints_own_thread(tmp_path: Path) -> None:
    seen: dict[str, str] = {}
    app = _notes_app(tmp_path, seen)
    with TestClient(app, raise_server_exceptions=False) as client:
        made = client.post("/notes/first")
        assert made.status_code == 201 and made.json() == {"text": "first"}
        assert seen["commit"] == seen["endpoint"]
        assert not seen["endpoint"].startswith(threading.current_thread().name)
        # A commit that fails is the client's answer (not a 201 sent before it), rolled back
        # on the same thread.
        seen.clear()
        duplicate = client.post("/notes/first")
        assert duplicate.status_code == 409 and duplicate.json() == {"detail": "duplicate"}
        assert "commit" not in seen and seen["rollback"] == seen["endpoint"]
        # An endpoint that raises after writing leaves nothing behind.
        seen.clear()
        failed = client.post("/notes/second", params={"fail": True})
        assert failed.status_code == 500
        assert "commit" not in seen and seen["rollback"] == seen["endpoint"]
    assert _texts(app) == ["first"]


def _two_routers(make: Callable[..., APIRouter]) -> FastAPI:
    app = FastAPI()
    for prefix in ("/v1/a", "/v1/b"):
        router = make(prefix=prefix)

        @router.get("/{item_id}")
        def read(item_id: int) -> dict[str, int]:
            return {"id": item_id}

        @router.post("")
        def make_one() -> dict[str, str]:
            return {"made": "yes"}

        app.include_router(router)
    return app


def test_routers_skipped_by_prefix_answer_as_before() -> None:
    """A router tried only for paths under its prefix routes every request as FastAPI's own."""
    answers = []
    for make in (APIRouter, api_router):
        with TestClient(_two_routers(make)) as client:
            answers.append(
                [
                    (r.status_code, r.text, r.headers.get("allow"))
                    for r in (
                        client.get("/v1/b/7"),
                        client.post("/v1/b"),
                        client.delete("/v1/b/7"),  # 405, naming GET
                        client.get("/v1/b/x"),  # 422
                        client.get("/v1/c/7"),  # 404
                        client.get("/v1/bb/7"),  # 404, though it starts with /v1/b
                        client.get("/v1/a/7/", follow_redirects=False),  # redirect to /v1/a/7
                    )
                ]
            )
    assert answers[0] == answers[1]
    assert [status for status, _, _ in answers[1]] == [200, 200, 405, 422, 404, 404, 307]
