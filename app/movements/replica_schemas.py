"""Schemas of /v1/replicas and /v1/tasks/{name}/replicas."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

from app.api_types import Count
from app.models.replica import ReplicaTechnique


class ReplicaCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: Annotated[int, Strict()] = Field(
        ge=1, le=8, description="How many replicas the task should have in total."
    )
    technique: ReplicaTechnique = ReplicaTechnique.active_standby


class ReplicaStateUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Literal["STABLE", "UP_FAILURE", "STABILIZATION"]
    epoch: Count | None = Field(
        default=None,
        description="The replica epoch the reporting host holds; an older one is refused (409).",
    )


class ReplicaRead(BaseModel):
    id: int
    task: str
    host: str
    technique: ReplicaTechnique
    load: float
    price: float | None
    contract_id: int | None
    # The replica's fencing token, raised on each of its moves (the primary's is the task's).
    epoch: int
    # The reported DPC state, or FAILED when the host's heartbeats have stopped.
    state: str
    reported_state: str
    host_liveness: str
    state_at: datetime
