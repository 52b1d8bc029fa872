"""The caller of a service function, independent of how it authenticated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """An admin (participant_id is None) or one participant."""

    participant_id: int | None
    name: str

    @property
    def is_admin(self) -> bool:
        return self.participant_id is None

    @property
    def actor(self) -> str:
        """How the audit log names this caller."""
        return "admin" if self.is_admin else f"participant:{self.name}"


ADMIN = Principal(participant_id=None, name="admin")
