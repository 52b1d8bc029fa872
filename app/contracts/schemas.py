"""Contract wire formats: XCreate / XCounter / XRead families."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from app.api_types import NameRef, NonNegative, Positive, Timestamp, Version
from app.models import ContractStatus, Recovery

DEFAULT_TERM = timedelta(days=365)


class AvailabilityTerms(BaseModel):
    model_config = ConfigDict(extra="forbid", from_attributes=True)

    recovery: Recovery | None = Field(default=None, description="gap, rollback or precise")
    max_delay_seconds: Positive | None = Field(
        default=None, gt=0, description="The application's maximum incremental delay X."
    )
    replica_hosting: bool = Field(default=False, description="The partner may host replicas.")


class ContractTerms(BaseModel):
    """Terms as a party writes them. Cross-field rules report the later field as the culprit."""

    model_config = ConfigDict(extra="forbid")

    price_min: Positive = Field(description="Lowest price per unit load per second.")
    price_max: Positive = Field(description="Highest price per unit load per second.")
    starts_at: Timestamp | None = Field(default=None, description="Default: now.")
    ends_at: Timestamp | None = Field(default=None, description="Default: a year after start.")
    min_move_seconds: NonNegative = Field(default=0.0, description="Minimum move duration.")
    availability: AvailabilityTerms | None = None

    @field_validator("price_max")
    @classmethod
    def _range_ordered(cls, value: float, info: ValidationInfo) -> float:
        low = info.data.get("price_min")
        if low is not None and value < low:
            raise ValueError(f"price_max {value} is below price_min {low}")
        return value

    @field_validator("ends_at")
    @classmethod
    def _term_ordered(cls, value: datetime | None, info: ValidationInfo) -> datetime | None:
        start = info.data.get("starts_at")
        if value is not None and start is not None and value <= start:
            raise ValueError("ends_at must be after starts_at")
        return value

    def term(self, now: datetime) -> tuple[datetime, datetime]:
        starts = (self.starts_at or now).astimezone(UTC)
        ends = (self.ends_at or starts + DEFAULT_TERM).astimezone(UTC)
        return starts, ends


class ContractCreate(ContractTerms):
    partner: NameRef = Field(description="Name of the participant the contract is proposed to.")


class ContractCounter(ContractTerms):
    """New terms in answer to the ones on the table. Terms left out keep their current value."""

    price_min: Positive = Field(default=None, validate_default=False)  # type: ignore[assignment]
    price_max: Positive = Field(default=None, validate_default=False)  # type: ignore[assignment]
    version: Version = Field(description="The version you are answering; 409 if it moved on.")


class VersionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Version = Field(description="The version you are answering; 409 if it moved on.")


class ContractRead(BaseModel):
    id: int
    status: ContractStatus
    version: int
    proposer: str
    partner: str
    terms_author: str | None
    price_min: float
    price_max: float
    starts_at: datetime
    ends_at: datetime
    min_move_seconds: float
    availability: AvailabilityTerms | None
    settled_amount: float | None
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None


class ContractEventRead(BaseModel):
    version: int
    action: str
    author: str | None
    actor: str
    terms: dict[str, Any]
    at: datetime


class LedgerEntryRead(BaseModel):
    id: int
    kind: str
    payer: str
    payee: str
    task_id: int | None
    load: float
    price: float
    seconds: float
    amount: float
    at: datetime


class LedgerRead(BaseModel):
    contract_id: int
    entries: list[LedgerEntryRead]
    balances: dict[str, float] = Field(description="Net per party: received minus paid.")
    total_paid: float
