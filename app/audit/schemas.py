"""Audit wire formats."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class AuditEntryRead(BaseModel):
    model_config = ConfigDict(
        json_schema_extra={
            "example": {
                "id": 42,
                "at": "2026-11-25T03:00:00.123456Z",
                "actor": "participant:A",
                "action": "contract.accepted",
                "entity_type": "contract",
                "entity_id": 7,
                "detail": {"version": 3, "status": "active"},
                "participants": ["A", "B"],
                "chain": 1,
                "prev_hash": "9f2c...",
                "hash": "41d0...",
            }
        }
    )

    id: int
    at: datetime
    actor: str = Field(description='"admin", "admin:NAME", "participant:NAME", "system", ...')
    action: str
    entity_type: str
    entity_id: int | None
    detail: dict[str, Any]
    participants: list[str] = Field(description="The participants this entry is about.")
    chain: int = Field(
        description="The chain the entry extends: the log is several hash chains side by side, "
        "so that concurrent writers do not wait for one another."
    )
    prev_hash: str = Field(
        description="The hash of the entry before it in its chain (64 zeros for a chain's first)."
    )
    hash: str = Field(description="SHA-256 over this entry's fields and prev_hash.")


class AuditPageRead(BaseModel):
    items: list[AuditEntryRead] = Field(description="Newest first.")
    next_cursor: int | None = Field(
        description="Pass as ?cursor= for the next (older) page; null on the last page."
    )
