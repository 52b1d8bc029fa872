"""The caller of a service function, independent of how it authenticated."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Principal:
    """An admin (participant_id is None, ``name`` the admin's) or one participant."""

    participant_id: int | None
    name: str
    # A participant that authenticated with its previous key, inside the grace period after a
    # rotation: it may work on, but not rotate again (that would hand a leaked old key the new one).
    by_previous_key: bool = False

    @property
    def is_admin(self) -> bool:
        return self.participant_id is None

    @property
    def actor(self) -> str:
        """How the audit log names this caller: "admin" for the single FEDLOAD_ADMIN_KEY (as
        before named admins), "admin:NAME" for each admin of FEDLOAD_ADMIN_KEYS."""
        if self.is_admin:
            return "admin" if self.name == "admin" else f"admin:{self.name}"
        return f"participant:{self.name}"


ADMIN = Principal(participant_id=None, name="admin")


def admin_named(name: str) -> Principal:
    return Principal(participant_id=None, name=name)
