from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.api_types import NameRef, NonNegative, Positive, RowId, Version
from app.limits import MAX_LIST_ITEMS
from app.models import OfferStatus


class OfferCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    contract_id: RowId = Field(description="The active contract the load moves under.")
    tasks: list[NameRef] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Tasks you host and will pay to shed.",
    )
    replicas: list[NameRef] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description=(
            "Tasks whose replica you host and will pay to shed, like load; only over a contract "
            "that allows replica hosting, never to a participant hosting a copy already."
        ),
    )
    price: Positive = Field(description="Price per unit load per second, inside the range.")
    loads: dict[NameRef, NonNegative] | None = Field(
        default=None,
        max_length=MAX_LIST_ITEMS,
        description="Each task's load as the offerer measures it; default its declared load.",
    )
    relay_for: RowId | None = Field(
        default=None,
        description=(
            "An open offer addressed to you that this one makes room for (a chained move: you "
            "shed load here so you can take that offer's). A relay may be relayed again, up to "
            "six relays in a chain, never back to a participant already giving in it."
        ),
    )
    reservation_price: NonNegative | None = Field(
        default=None,
        description=(
            "The most you would pay per unit load per second for the offered tasks: your "
            "marginal cost of shedding them less the hysteresis band "
            "(app.market.protocol.giver_reservation). At least ``price``. Private: never shown "
            "to the taker. When the taker also sends its reservation, the registry sets the "
            "agreed price between the two, inside the contract's range "
            "(app.market.protocol.negotiated_price)."
        ),
    )


class OfferAccept(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Version
    tasks: list[NameRef] | None = Field(
        default=None,
        max_length=MAX_LIST_ITEMS,
        description="The subset you take (partial acceptance); default all, or none of them "
        "when only ``replicas`` is given.",
    )
    replicas: list[NameRef] | None = Field(
        default=None,
        max_length=MAX_LIST_ITEMS,
        description="The offered replicas you take; default all, or none of them when only "
        "``tasks`` is given.",
    )
    reservation_price: NonNegative | None = Field(
        default=None,
        description=(
            "The least you would take per unit load per second for the tasks you accept: your "
            "marginal cost of taking them plus the hysteresis band "
            "(app.market.protocol.taker_reservation). Private: never shown to the giver. With "
            "the giver's reservation the agreed price is the midpoint of the overlap of the two "
            "reservations with the contract's range, never below the offered price when the "
            "giver asked its asking price; without it the offered price stands. Refused with "
            "409 when no price works for both."
        ),
    )


class OfferDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Version


class OfferRead(BaseModel):
    id: int
    contract_id: int
    src: str = Field(serialization_alias="from")
    to: str
    tasks: list[str]
    replicas: list[str] = Field(default_factory=list)
    loads: dict[str, float]
    accepted_tasks: list[str]
    accepted_replicas: list[str] = Field(default_factory=list)
    price: float = Field(description="The price the giver offered.")
    agreed_price: float | None = Field(
        default=None,
        description=(
            "The price the accepted tasks move at, per unit load per second: the negotiated "
            "price when both sides sent a reservation, else the offered price; null until "
            "accepted."
        ),
    )
    status: OfferStatus
    version: int
    movement_ids: list[int]
    relay_for: int | None = None
    relay_chain: list[str] = Field(
        default_factory=list,
        description=(
            "For a relay: the participants that gave load earlier in its chain, origin first "
            "(the offer's own giver is `from`)."
        ),
    )
    created_at: datetime
    decided_at: datetime | None

    model_config = ConfigDict(populate_by_name=True)
