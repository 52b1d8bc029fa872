"""Service configuration, read from the environment (``FEDLOAD_*`` and ``DATABASE_URL``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.db.session import DatabaseOptions

DEVELOPMENT_ADMIN_KEY = "dev-admin-key-change-me"
DEFAULT_SQLITE_PATH = Path("var") / "fedload.db"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="FEDLOAD_", extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    database_url: str = Field(
        default=f"sqlite:///{DEFAULT_SQLITE_PATH}",
        validation_alias=AliasChoices("DATABASE_URL", "FEDLOAD_DATABASE_URL"),
    )
    admin_key: str = DEVELOPMENT_ADMIN_KEY
    session_secret: str = "dev-session-secret-change-me"
    reports_dir: Path = Path("var") / "reports"
    # Agents heartbeat the service at this interval; suspect after one miss, failed after
    # ``heartbeat_misses``. Agent-to-agent heartbeats (100 ms in Borealis) are the runtime's.
    heartbeat_interval_seconds: float = Field(default=1.0, gt=0)
    heartbeat_misses: int = Field(default=3, ge=1)
    # Lease of a reconciliation permit (``/v1/permits``): long beside a reconciliation, so a
    # holder renews rarely, short enough that a crashed holder frees the fragment soon.
    permit_lease_seconds: float = Field(default=10.0, gt=0)
    # A prepared movement whose target has not committed within this lease is aborted by the
    # service (the task keeps its old host and may move again). Long beside a move (checkpoint
    # shipped and restored, seconds), short enough that a crashed target frees the task soon.
    movement_lease_seconds: float = Field(default=60.0, gt=0)

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

    @model_validator(mode="after")
    def _refuse_default_secrets_outside_development(self) -> Settings:
        # A forgotten default admin key would open every contract to anyone who read the README.
        if self.environment == "production":
            if self.admin_key == DEVELOPMENT_ADMIN_KEY:
                raise ValueError(
                    "FEDLOAD_ADMIN_KEY is still the development default; "
                    "set a secret value when FEDLOAD_ENVIRONMENT=production"
                )
            if self.session_secret == "dev-session-secret-change-me":
                raise ValueError(
                    "FEDLOAD_SESSION_SECRET is still the development default; "
                    "set a secret value when FEDLOAD_ENVIRONMENT=production"
                )
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
