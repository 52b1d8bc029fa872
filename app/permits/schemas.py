"""Schemas of /v1/permits: the registry's reconciliation arbiter."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.api_types import NameRef


class PermitAsk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    replica: NameRef = Field(
        description="The replica (node name) that asks for or gives back the permit.",
    )


class PermitRead(BaseModel):
    fragment: str
    # The replica holding the permit, null once released; a lease past ``expires_at`` is free.
    holder: str | None
    participant: str | None
    expires_at: datetime
    fence: int
    held: bool = Field(description="Whether a replica holds an unexpired lease now.")


class PermitDecision(PermitRead):
    replica: str
    granted: bool = Field(
        description="True: the replica may reconcile until expires_at (ask again to renew). "
        "False: holder holds the permit until expires_at."
    )
    serving: list[str] = Field(
        default_factory=list,
        description="The participants holding another copy of the fragment that serve its "
        "consumers now by the registry's records (the primary host and active standbys in "
        "STABLE or UP_FAILURE, none failed), primary first: a copy may stop serving for its "
        "redo while this is not empty.",
    )
