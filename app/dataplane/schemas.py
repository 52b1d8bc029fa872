"""Schemas of /v1/dataplane: tokens for agents' Flight calls, and the key that verifies them."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from app.api_types import NameRef, RowId

Operation = Literal[
    "read", "append", "fence", "ack", "release", "checkpoint", "reinstate", "retire", "standby"
]


class TokenRequest(BaseModel):
    """One stream (read, append, fence, ack) or one task and movement (release, checkpoint,
    reinstate, retire), and the operations the caller will perform on it."""

    model_config = ConfigDict(extra="forbid")

    operations: list[Operation] = Field(min_length=1, max_length=8)
    stream: NameRef | None = Field(
        default=None,
        description="A task's output stream, '<task>.out', or an active replica's own log "
        "of it on its holder H, '<task>.out@H' (and its DPC companion '<task>.out@H.dpc').",
    )
    task: NameRef | None = None
    movement: RowId | None = Field(
        default=None,
        description="The movement a task operation is for (required with task, except standby).",
    )
    consumer: NameRef | None = Field(
        default=None, description="With ack: the consuming task acknowledged as."
    )


class TokenRead(BaseModel):
    token: str = Field(description="Send as 'authorization: Bearer <token>' on the Flight call.")
    serving: str = Field(description="The participant whose Flight endpoint accepts the token.")
    expires_at: datetime


class DataplaneKeyRead(BaseModel):
    issuer: str
    algorithm: Literal["EdDSA"]
    public_keys: list[str] = Field(description="Ed25519 public keys in PEM that verify tokens.")
