"""Service configuration, read from the environment (``FEDLOAD_*`` and ``DATABASE_URL``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    # Largest request body the API reads (413 above it): far above any real request (a task
    # with its fragment parameters is a few kB), far below what would strain the service.
    max_body_bytes: int = Field(default=1024 * 1024, ge=1024)

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
