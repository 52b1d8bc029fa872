from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.api_types import Count, NameRef
from app.models import MovementReason, MovementStatus


class MovementCreate(BaseModel):
    """A relocation outside the market: failover, replica switch, reconciliation, or admin."""

    model_config = ConfigDict(extra="forbid")

    task: NameRef
    to: NameRef = Field(description="The participant that will host the task.")
    reason: MovementReason


class MovementCommit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    epoch: Count = Field(description="The lease epoch returned by prepare; fences stale commits.")


class MovementRead(BaseModel):
    id: int
    task: str
    src: str = Field(serialization_alias="from")
    to: str
    reason: MovementReason
    status: MovementStatus
    contract_id: int | None
    offer_id: int | None
    price: float | None
    epoch: int
    # True when the copy that moves is the source's replica of the task, not its primary.
    replica: bool = False
    prepared_at: datetime
    finished_at: datetime | None
    lease_seconds_left: float | None = Field(
        default=None,
        description="A prepared movement's time left, in seconds, before the registry aborts it "
        "unless it is committed (its lease); null once committed or aborted. Seconds, not a "
        "time, so that a mover on another host needs no clock agreement to plan within it.",
    )

    model_config = ConfigDict(populate_by_name=True)


class LeaseRead(BaseModel):
    task: str
    host: str
    epoch: int
    moving: bool
