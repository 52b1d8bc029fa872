"""Service configuration, read from the environment (``FEDLOAD_*`` and ``DATABASE_URL``)."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.db.session import DatabaseOptions

DEVELOPMENT_ADMIN_KEY = "dev-admin-key-change-me"
DEFAULT_SQLITE_PATH = Path("var") / "fedload.db"
# How the single FEDLOAD_ADMIN_KEY's holder is named in the audit log.
DEFAULT_ADMIN_NAME = "admin"
ADMIN_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FEDLOAD_", extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    database_url: str = Field(
        default=f"sqlite:///{DEFAULT_SQLITE_PATH}",
        validation_alias=AliasChoices("DATABASE_URL", "FEDLOAD_DATABASE_URL"),
    )
    admin_key: str = DEVELOPMENT_ADMIN_KEY
    # Named admins, "name:key,name:key" (FEDLOAD_ADMIN_KEYS): each is audited by its name. With
    # named admins, FEDLOAD_ADMIN_KEY still works (as admin "admin") only when it is set too.
    admin_keys: str = ""
    # After ``POST /v1/participants/me/keys`` the old key keeps working this long (0: not at all).
    key_rotation_grace_seconds: float = Field(default=600.0, ge=0)
    # A worker remembers a verified API key this long (app/auth/key_cache.py; 0: off): another
    # worker's suspension or key revocation takes effect here within it.
    key_cache_seconds: float = Field(default=1.0, ge=0, le=60)
    # Request logs: one JSON (or text) line per request on stderr. Unset: logging is left as it
    # is (tests, embedding); ``fedload serve`` sets json unless told otherwise.
    log_format: Literal["json", "text"] | None = None
    # When set, /metrics answers only requests bearing this token (Prometheus' bearer_token).
    metrics_token: str | None = None
    session_secret: str = "dev-session-secret-change-me"
    reports_dir: Path = Path("var") / "reports"
    # Agents heartbeat the service at this interval; suspect after one miss, failed (and
    # fenced) once a window of ``heartbeat_misses`` intervals closed with no heartbeat
    # (app.availability.detector's one rule). Agent-to-agent heartbeats use the detector's
    # default, 100 ms x 3; to the service an HTTP request and a transaction each, so 1 s.
    heartbeat_interval_seconds: float = Field(default=1.0, gt=0)
    heartbeat_misses: int = Field(default=3, ge=1)
    # How often the service's failure sweeper judges the members: a failure is declared at
    # most this long after its window closed.
    failure_sweep_interval_seconds: float = Field(default=0.25, gt=0)
    # Lease of a reconciliation permit (``/v1/permits``): long beside a reconciliation, so a
    # holder renews rarely, short enough that a crashed holder frees the fragment soon.
    permit_lease_seconds: float = Field(default=10.0, gt=0)
    # A prepared movement whose target has not committed within this lease is aborted by the
    # service (the task keeps its old host and may move again). Long beside a move (checkpoint
    # shipped and restored, seconds), short enough that a crashed target frees the task soon.
    movement_lease_seconds: float = Field(default=60.0, gt=0)
    # Largest request body the API reads (413 above it): far above any real request (a task
    # with its fragment parameters is a few kB), far below what would strain the service.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)

    # Throughput and overload (issue 15). Every worker process admits at most
    # ``max_concurrent_requests`` requests at a time and gives each one its own pooled database
    # connection and a thread; the rest wait up to ``request_queue_seconds`` and then get a 503
    # with Retry-After. Sizing the three together is what stops the 30 s stalls: before, 40
    # threads shared 30 connections, and requests holding a connection waited for a thread
    # while threads waited for a connection until the pool timed out.
    max_concurrent_requests: int = Field(default=8, ge=1, le=200)
    request_queue_seconds: float = Field(default=5.0, ge=0)
    # Connections beyond the admitted requests: the movement sweeper and the admin UI's pages.
    db_pool_spare: int = Field(default=2, ge=0, le=50)
    # How long a request waits for a pooled connection before a 503 (never the old 30 s).
    db_pool_timeout_seconds: float = Field(default=2.0, gt=0)
    # A database that accepts the TCP connection but never answers must not hang a request or
    # the start-up: PostgreSQL ``connect_timeout`` (whole seconds, at least 1) and
    # ``statement_timeout``; SQLite's busy timeout waits this long on the file lock.
    db_connect_timeout_seconds: int = Field(default=3, ge=1, le=300)
    db_statement_timeout_seconds: float = Field(default=10.0, gt=0)
    # Uvicorn's access log: a formatted, flushed line for every request of a JSON API whose
    # requests cost a few milliseconds each; off by default, on with FEDLOAD_ACCESS_LOG=true
    # or ``fedload serve --access-log`` (the issue measured the service with it on).
    access_log: bool = False
    # The data plane's signing key (issue 14, item 5): an Ed25519 private key in PEM that signs
    # the tokens agents present on every Flight call. Agents verify with its public key
    # (``GET /v1/dataplane/key``) and hold no secret of the service. Unset: a key generated at
    # the first start in ``var/`` beside the SQLite file (development and tests); production
    # must name the file, so that every worker and every restart signs with the same key.
    dataplane_key_file: Path | None = None
    # Lifetime of a data-plane token: long beside a Flight call, short beside a task's stay.
    dataplane_token_seconds: float = Field(default=300.0, gt=0, le=86400)

    def database_options(self) -> DatabaseOptions:
        """The API's pool: one connection per admitted request plus the spares, never more
        (no overflow: a connection beyond the plan is a leak and shows as a 503)."""
        return DatabaseOptions(
            pool_size=self.max_concurrent_requests + self.db_pool_spare,
            max_overflow=0,
            pool_timeout=self.db_pool_timeout_seconds,
            connect_timeout=self.db_connect_timeout_seconds,
            statement_timeout=self.db_statement_timeout_seconds,
        )

    def read_database_options(self) -> DatabaseOptions:
        """The pool of the API's reads outside a transaction (PostgreSQL,
        ``app.db.session.autocommit_reads``): one connection per admitted request, never more.
        A request holds at most one of each pool's connections at a time (a read that must
        write gives its read connection back first, ``in_transaction_from_now``), so neither
        pool makes an admitted request wait; the spares serve the other engine's users."""
        return DatabaseOptions(
            pool_size=self.max_concurrent_requests,
            max_overflow=0,
            pool_timeout=self.db_pool_timeout_seconds,
            connect_timeout=self.db_connect_timeout_seconds,
            statement_timeout=self.db_statement_timeout_seconds,
        )

    @property
    def admins(self) -> dict[str, str]:
        """Every admin key in force, by the admin's name."""
        return dict(
            admins_in_force(self.admin_key, self.admin_keys, "admin_key" in self.model_fields_set)
        )

    @model_validator(mode="after")
    def _check_admin_keys(self) -> Settings:
        self.admins  # noqa: B018  (parsed here so a mistake stops the start, naming the item)
        return self

    @model_validator(mode="after")
    def _refuse_default_secrets_outside_development(self) -> Settings:
        # A forgotten default admin key would open every contract to anyone who read the README.
        if self.environment == "production":
            if DEVELOPMENT_ADMIN_KEY in self.admins.values():
                raise ValueError(
                    "FEDLOAD_ADMIN_KEY is still the development default; "
                    "set a secret value when FEDLOAD_ENVIRONMENT=production"
                )
            if self.session_secret == "dev-session-secret-change-me":
                raise ValueError(
                    "FEDLOAD_SESSION_SECRET is still the development default; "
                    "set a secret value when FEDLOAD_ENVIRONMENT=production"
                )
            if self.dataplane_key_file is None:
                raise ValueError(
                    "FEDLOAD_DATAPLANE_KEY_FILE is unset; name the data plane's Ed25519 signing "
                    "key (PEM) when FEDLOAD_ENVIRONMENT=production, so every worker and every "
                    "restart signs agents' tokens with the same key"
                )
        return self

    @property
    def dataplane_key_path(self) -> Path:
        """Where the signing key is read (or, unset outside production, generated)."""
        return self.dataplane_key_file or DEFAULT_SQLITE_PATH.parent / "dataplane-signing-key.pem"


@lru_cache(maxsize=16)
def admins_in_force(
    admin_key: str, admin_keys: str, admin_key_set: bool
) -> tuple[tuple[str, str], ...]:
    """(name, key) of every admin: FEDLOAD_ADMIN_KEYS' named admins, and FEDLOAD_ADMIN_KEY's
    holder "admin" unless named admins are configured and FEDLOAD_ADMIN_KEY is not set."""
    admins: dict[str, str] = {}
    for position, item in enumerate(admin_keys.split(","), start=1):
        if not item.strip():
            continue
        name, sep, key = item.strip().partition(":")
        where = f"FEDLOAD_ADMIN_KEYS item {position}"
        if not sep or not key:
            raise ValueError(f"{where}: expected name:key, got {name!r} with no key")
        if not ADMIN_NAME_PATTERN.match(name):
            raise ValueError(
                f"{where}: admin name {name!r} must be letters, digits, '_', '.', '-' (at most 64)"
            )
        if name in admins:
            raise ValueError(f"{where}: admin {name!r} is named twice")
        if key in admins.values():
            raise ValueError(f"{where}: admin {name!r} has another admin's key")
        admins[name] = key
    if not admins or admin_key_set:
        if DEFAULT_ADMIN_NAME in admins:
            raise ValueError(
                "FEDLOAD_ADMIN_KEYS names an admin 'admin' and FEDLOAD_ADMIN_KEY is set too; "
                "'admin' is FEDLOAD_ADMIN_KEY's holder: rename one"
            )
        if admin_key in admins.values():
            raise ValueError("FEDLOAD_ADMIN_KEY is also a key in FEDLOAD_ADMIN_KEYS")
        admins = {DEFAULT_ADMIN_NAME: admin_key, **admins}
    return tuple(admins.items())


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
