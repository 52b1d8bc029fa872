from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.participants.schemas import NAME_PATTERN


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    load: float = Field(ge=0, description="Declared load in load units.")


class TaskPin(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pinned: bool


class TaskRead(BaseModel):
    id: int
    name: str
    owner: str
    host: str
    load: float
    contract_id: int | None
    price: float | None
    host_since: datetime
    pinned: bool
    lease_epoch: int
