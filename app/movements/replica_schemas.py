"""Schemas of /v1/replicas and /v1/tasks/{name}/replicas."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.models.replica import ReplicaTechnique


class ReplicaCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    k: int = Field(ge=1, le=8, description="How many replicas the task should have in total.")
    technique: ReplicaTechnique = ReplicaTechnique.active_standby


class ReplicaStateUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    state: Literal["STABLE", "UP_FAILURE", "STABILIZATION"]


class ReplicaRead(BaseModel):
    id: int
    task: str
    host: str
    technique: ReplicaTechnique
    load: float
    price: float | None
    contract_id: int | None
    # The reported DPC state, or FAILED when the host's heartbeats have stopped.
    state: str
    reported_state: str
    host_liveness: str
    state_at: datetime
