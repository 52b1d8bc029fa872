from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.models import OfferStatus


class OfferCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    contract_id: int = Field(description="The active contract the load moves under.")
    tasks: list[str] = Field(min_length=1, description="Tasks you host and will pay to shed.")
    price: float = Field(gt=0, description="Price per unit load per second, inside the range.")
    loads: dict[str, float] | None = Field(
        default=None,
        description="Each task's load as the offerer measures it; default its declared load.",
    )
    relay_for: int | None = Field(
        default=None,
        description=(
            "An open offer addressed to you that this one makes room for (a chained move: you "
            "shed load here so you can take that offer's). A relay offer is not relayed again."
        ),
    )


class OfferAccept(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int
    tasks: list[str] | None = Field(
        default=None, description="The subset you take (partial acceptance); default all."
    )


class OfferDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int


class OfferRead(BaseModel):
    id: int
    contract_id: int
    src: str = Field(serialization_alias="from")
    to: str
    tasks: list[str]
    loads: dict[str, float]
    accepted_tasks: list[str]
    price: float
    status: OfferStatus
    version: int
    movement_ids: list[int]
    relay_for: int | None = None
    created_at: datetime
    decided_at: datetime | None

    model_config = ConfigDict(populate_by_name=True)
