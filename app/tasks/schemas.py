from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.api_types import JsonObject, NameRef, NonNegative
from app.limits import MAX_LIST_ITEMS
from app.participants.schemas import NAME_PATTERN


class TaskInput(BaseModel):
    """One input of a fragment: the output stream of another task of the same owner."""

    model_config = ConfigDict(extra="forbid")

    task: NameRef = Field(description="The name of the task whose output this one reads.")


class TaskInputRead(TaskInput):
    """An input as the registry returns it: with the fragment its task runs, which says what
    the stream carries (a host may not be able to read the input task itself)."""

    fragment: str | None = None
    served_by: str | None = Field(
        default=None,
        description="The participant whose data-plane endpoint serves the input's stream: its "
        "owner, or for a source running on a partner, that partner.",
    )
    active_copies: list[str] = Field(
        default_factory=list,
        description="Participants running an active replica of the input's task: each keeps "
        "the stream's stable rows in a log of its own, '<task>.out@<participant>' on its "
        "endpoint, which a consumer may read instead of the owner's (a bucket is the same in "
        "every copy's log).",
    )


class TaskCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=NAME_PATTERN,
        description="'<your participant name>.<local name>' (e.g. 'A.q01'); the local name has "
        "letters, digits, '_' and '-' only. Any other name is a 422.",
    )
    load: NonNegative = Field(description="Declared load in load units.")
    fragment: NameRef | None = Field(
        default=None,
        description="A fragment kind of the catalogue (e.g. 'generator', "
        "'connections_per_source'); absent: a declared load, nothing runs.",
    )
    params: JsonObject = Field(
        default_factory=dict, description="The fragment's parameters; defaults fill the rest."
    )
    inputs: list[TaskInput] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Tasks of yours whose output streams it reads.",
    )


class TaskUpdate(BaseModel):
    """A change of declared load (owner or admin) and/or of the pin (admin only)."""

    model_config = ConfigDict(extra="forbid")

    load: NonNegative | None = Field(default=None, description="New declared load.")
    pinned: bool | None = Field(default=None, description="Admin only: keep it where it is.")

    @model_validator(mode="after")
    def _something(self) -> TaskUpdate:
        if self.load is None and self.pinned is None:
            raise ValueError("send 'load' and/or 'pinned'")
        return self


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
    fragment: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: list[TaskInputRead] = Field(default_factory=list)
