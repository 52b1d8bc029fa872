"""Engines and sessions. One session per request (or per CLI command), committed at the edge."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.orm import Session, sessionmaker

from app.db.cursor import LazyDescriptionCursor


@dataclass(frozen=True)
class DatabaseOptions:
    """How one process talks to the registry: pool size and the timeouts that keep a slow or
    silent database from stalling requests (issue 15).

    The defaults suit CLI commands, scripts and tests (a generous pool that may overflow); the
    API sizes its pool to the requests it admits (``Settings.database_options``)."""

    pool_size: int = 10
    max_overflow: int = 20
    # Seconds a checkout waits for a pooled connection before ``sqlalchemy.exc.TimeoutError``
    # (rendered by the API as 503 + Retry-After, ``app.db.faults``).
    pool_timeout: float = 30.0
    connect_timeout: int = 3
    statement_timeout: float = 10.0


def normalise_url(url: str) -> str:
    """Accept plain ``postgresql://`` URLs and route them to psycopg 3."""
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        return "postgresql+psycopg://" + url.split("://", 1)[1]
    return url


def _ensure_sqlite_folder(url: str) -> None:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)


def _pool_arguments(url: str, options: DatabaseOptions) -> dict[str, Any]:
    if make_url(url).database in (None, "", ":memory:"):
        return {}  # an in-memory SQLite database lives in one connection (SingletonThreadPool)
    return {
        "pool_size": options.pool_size,
        "max_overflow": options.max_overflow,
        "pool_timeout": options.pool_timeout,
    }


_ENGINES: dict[tuple[str, DatabaseOptions], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def get_engine(url: str, options: DatabaseOptions = DatabaseOptions()) -> Engine:
    """One engine per URL and pool options, for the life of the process."""
    key = (normalise_url(url), options)
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = _ENGINES[key] = _create_engine(key[0], options)
        return engine


def dispose_engines(url: str) -> None:
    """Close every pooled connection to ``url``, whatever the pool options: the API's engines
    (sized by ``Settings.database_options`` and ``read_database_options``) and the scripts'
    alike. A SQLite file is complete
    on disk (its WAL checkpointed) only once no connection holds it, e.g. before it is copied."""
    wanted = normalise_url(url)
    with _ENGINES_LOCK:
        engines = [
            engine
            for cache in (_ENGINES, _READ_ENGINES)
            for (u, _), engine in cache.items()
            if u == wanted
        ]
    for engine in engines:
        engine.dispose()


def _create_engine(url: str, options: DatabaseOptions, **engine_arguments: Any) -> Engine:
    _ensure_sqlite_folder(url)
    if url.startswith("sqlite"):
        # The API serves requests on a thread pool; a SQLite connection must be usable from
        # whichever thread picks it up. The busy timeout bounds a wait on the file lock.
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": options.statement_timeout},
            **_pool_arguments(url, options),
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection, _record):  # type: ignore[no-untyped-def]
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.close()

        return engine
    connect_args: dict[str, Any] = {}
    if make_url(url).get_backend_name() == "postgresql":
        # connect_timeout bounds a server that accepts TCP and never answers; statement_timeout
        # (milliseconds) bounds a query stuck on a lock or a dying server.
        # A host that dies or freezes never answers at all, and statement_timeout is the
        # server's: tcp_user_timeout (ms) fails a send that goes unacknowledged, keepalives find
        # a silent idle connection, so neither a request nor a pooled connection waits forever.
        connect_args = {
            "connect_timeout": options.connect_timeout,
            "options": f"-c statement_timeout={int(options.statement_timeout * 1000)}",
            "tcp_user_timeout": int((options.statement_timeout + options.connect_timeout) * 1000),
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 3,
        }
        if make_url(url).get_driver_name() == "psycopg":
            # cursor.description built only when read (app/db/cursor.py)
            connect_args["cursor_factory"] = LazyDescriptionCursor
    engine = create_engine(
        url, connect_args=connect_args, **_pool_arguments(url, options), **engine_arguments
    )
    _ping_when_idle(engine)
    return engine


# A pooled connection unused this long is tested before it is handed out.
IDLE_PING_SECONDS = 5.0
_IDLE_SINCE = "fedload.idle_since"


def _ping_when_idle(engine: Engine) -> None:
    """Test a connection at checkout only when it sat idle in the pool for a while.

    ``pool_pre_ping`` tests every checkout: a round trip per request, a tenth of a request's
    statements (``bench/api/cpu_profile.py``). A connection in steady use needs none: were the
    database lost meanwhile, the request's first statement fails and is a 503 (app/overload.py),
    and the pool drops every connection older than the failure. One left idle (the server
    restarted overnight, a firewall forgot it) is tested, and replaced if dead, as before.
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_connection, record):  # type: ignore[no-untyped-def]
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_connection, record, _proxy):  # type: ignore[no-untyped-def]
        idle_since = record.info.pop(_IDLE_SINCE, None)
        if idle_since is None or time.monotonic() - idle_since < IDLE_PING_SECONDS:
            return
        try:
            alive = engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            raise DisconnectionError(f"an idle pooled connection is dead: {exc}") from exc
        if not alive:
            raise DisconnectionError("an idle pooled connection is dead")


class NeedsTransaction(Exception):
    """A session reading outside a transaction was about to send more than a plain read.

    Raised before the statement reaches the server: whoever opened the session reruns the work
    in a transaction (``app/api_route.py``)."""


# What a session reading outside a transaction may send: a SELECT that locks nothing. Anything
# else (a write, a locking read, a CTE that may write) needs the transaction's atomicity.
_PLAIN_READ = re.compile(r"\s*SELECT\b", re.IGNORECASE)
_LOCKING = re.compile(r"\bFOR\s+(?:UPDATE|NO\s+KEY\s+UPDATE|SHARE|KEY\s+SHARE)\b", re.IGNORECASE)


def _plain_reads_only(  # type: ignore[no-untyped-def]
    _conn, _cursor, statement: str, _parameters, _context, _executemany
) -> None:
    if _PLAIN_READ.match(statement) is None or _LOCKING.search(statement) is not None:
        raise NeedsTransaction(statement.split(None, 1)[0])


_READ_ENGINES: dict[tuple[str, DatabaseOptions], Engine] = {}


def autocommit_reads(url: str, options: DatabaseOptions = DatabaseOptions()) -> Engine | None:
    """An engine whose connections never open a transaction, for sessions that only read;
    None unless PostgreSQL. One per URL and pool options, for the life of the process.

    psycopg opens a transaction with a BEGIN of its own before the first statement, and ends
    it with a COMMIT: on a request that sends one SELECT, three round trips where one does
    (``bench/api/README.md``). Without a transaction each statement reads its own snapshot,
    which is also what READ COMMITTED (the registry's isolation) gives each statement of a
    transaction, so a request that only reads sees the same rows either way. Any other
    statement raises ``NeedsTransaction`` before it is sent: a write, or a locking read, is
    only ever made inside a transaction.

    Its own pool, its connections put in autocommit once, when made: borrowing the
    transactional engine's connections (``execution_options(isolation_level=...)``) set the
    isolation level at every checkout and reset it at every checkin, which cost what the
    BEGIN and COMMIT had (``bench/api/README.md``, session 24). Nothing is reset on checkin
    either: a connection in autocommit has no transaction to roll back. Size it with
    ``Settings.read_database_options``."""
    key = (normalise_url(url), options)
    if make_url(key[0]).get_backend_name() != "postgresql":
        return None
    with _ENGINES_LOCK:
        reads = _READ_ENGINES.get(key)
        if reads is None:
            reads = _READ_ENGINES[key] = _create_engine(
                key[0], options, isolation_level="AUTOCOMMIT", pool_reset_on_return=None
            )
            # On this engine only: the transactional engine's statements pay for no listener.
            event.listen(reads, "before_cursor_execute", _plain_reads_only)
        return reads


# session.info: the engine a session reading outside a transaction moves to when it must write.
TRANSACTION_BIND = "fedload.transaction_bind"


def reading_session(factory: sessionmaker[Session], reads: Engine) -> Session:
    """A session of ``factory`` that reads outside a transaction (``autocommit_reads``) until
    ``in_transaction_from_now``."""
    session = factory(bind=reads)
    session.info[TRANSACTION_BIND] = factory.kw["bind"]
    return session


def in_transaction_from_now(session: Session) -> bool:
    """Move a ``reading_session`` to its transactional engine, after rolling back what it did
    (nothing was written: the statement that would have raised ``NeedsTransaction``, and its
    pending changes and audit entries are dropped with the rollback). False for any other
    session."""
    bind = session.info.pop(TRANSACTION_BIND, None)
    if bind is None:
        return False
    session.rollback()
    session.bind = bind
    return True


def session_factory(
    url: str, options: DatabaseOptions = DatabaseOptions()
) -> sessionmaker[Session]:
    return sessionmaker(bind=get_engine(url, options), expire_on_commit=False)


def check_database(url: str, options: DatabaseOptions = DatabaseOptions()) -> None:
    """Raise ``sqlalchemy.exc.OperationalError`` unless the database answers a query within
    the connect and statement timeouts (``/readyz``, ``fedload serve`` at start)."""
    with get_engine(url, options).connect() as connection:
        connection.execute(text("SELECT 1"))


@contextmanager
def unit_of_work(url: str) -> Iterator[Session]:
    """A session whose work is committed once at the end, or rolled back on any error."""
    session = session_factory(url)()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
