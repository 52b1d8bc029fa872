"""Participant wire formats."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api_types import JsonObject, NonNegative, Positive, ShortText
from app.limits import MAX_LIST_ITEMS
from app.models import ParticipantStatus

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# A Python distribution's name (PEP 508's spelling).
Distribution = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]


class ParticipantCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="Unique; letters, digits, '_', '.', '-'.")
    capacity: Positive = Field(description="Capacity in load units (1 unit = 1% of a CPU).")
    profile: JsonObject = Field(default_factory=dict, description="Public profile.")
    cost_model: JsonObject | None = Field(
        default=None, description="Private cost model, e.g. {'kind': 'mm1'}; default mm1."
    )


class ParticipantPublic(BaseModel):
    """What every participant may see of another."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    profile: dict[str, Any]
    status: ParticipantStatus
    liveness: str = Field(
        description="online, suspect (silent past one heartbeat interval), failed (declared "
        "by the registry's failure sweeper: fenced until it rejoins) or unknown (never heard)."
    )
    failed_at: datetime | None = Field(
        default=None,
        description="When the registry declared the participant failed (a heartbeat window "
        "closed unanswered); null while it is a member in good standing.",
    )


class ParticipantRead(ParticipantPublic):
    """A participant as it sees itself (and as admins see it)."""

    capacity: float
    cost_model: dict[str, Any]
    endpoint: str | None
    last_heartbeat_at: datetime | None
    created_at: datetime
    fragments: list[str] | None = Field(
        default=None,
        description="The Python distributions whose fragments its agent may run, as its last "
        "heartbeat said; a python fragment from any other is never offered to it (null: it "
        "never said, so none).",
    )


class ParticipantEndpoint(BaseModel):
    """Where a participant's agent serves its streams (Flight), for those who work with it."""

    name: str
    endpoint: str | None = Field(description="As its agent last reported, e.g. grpc://host:port")
    liveness: str


class ParticipantCreated(ParticipantRead):
    api_key: str = Field(description="Shown only in this response; store it now.")


class ParticipantStatusUpdate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    status: ParticipantStatus


class Heartbeat(BaseModel):
    """An agent's periodic report: alive, where to reach it, and its current load picture."""

    model_config = ConfigDict(extra="forbid")

    endpoint: ShortText | None = Field(default=None, description="e.g. grpc://host:port")
    load: NonNegative | None = Field(default=None, description="Current load in load units.")
    marginal_cost: NonNegative | None = None
    threshold: NonNegative | None = None
    node_state: Literal["STABLE", "UP_FAILURE", "STABILIZATION"] | None = None
    fragments: list[Distribution] | None = Field(
        default=None,
        max_length=MAX_LIST_ITEMS,
        description="The Python distributions whose fragments this agent's operator allows it "
        "to run (e.g. ['netmon-fragments']); absent: unchanged since the last heartbeat.",
    )


class HeartbeatAnswer(ParticipantRead):
    """The registry's answer to a heartbeat: the participant as it sees itself, and whether it
    is fenced. A fenced agent stops every fragment and replica it ran, then rejoins."""

    fenced: bool = Field(
        description="True once the registry declared this participant failed: its heartbeats "
        "are recorded but it stays failed; drop what you hosted, then POST "
        "/v1/participants/me/rejoin."
    )
    heartbeat_interval_seconds: float = Field(
        description="Heartbeat at this interval: the registry declares a participant failed "
        "once heartbeat_misses intervals pass with none."
    )
    heartbeat_misses: int = Field(description="Intervals in the registry's failure window.")


class Rejoined(ParticipantRead):
    """A participant back after a failure (or a rejoin that found it not fenced)."""

    was_fenced: bool = Field(description="False when the participant was not fenced.")


class KeyRotated(BaseModel):
    """A participant's new API key, shown only in this response."""

    api_key: str = Field(description="The new key; shown only in this response; store it now.")
    previous_key_valid_until: datetime | None = Field(
        description="Until when the key used before still works (null: it no longer does)."
    )
