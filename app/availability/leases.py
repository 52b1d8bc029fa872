"""The reconciliation permit rule: at most one unexpired holder per fragment. Pure.

Replicas of one fragment that cannot reach each other ask an arbiter before reconciling, so they
never all stop producing at once (Borealis SIGMOD 2005, section 5.2). The permit is a lease: a
holder that dies never releases, so a permit whose lease is over goes to the next asker; the
holder renews it by asking again. Each grant to a new holder raises the fence, a counter a
holder can carry so that a reconciliation begun under an older grant is recognisable as stale.

Both arbiters apply this rule: the Flight one of the scenarios (``spark_jobs.ha.arbiter``, in
memory) and the registry's REST one (``app.permits``, a row per fragment). Times
are seconds on whatever clock the caller keeps (monotonic in memory, UTC epoch in the database).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Permit:
    """Who holds a fragment's permit until when; ``holder`` None once released."""

    holder: str | None
    expires_at: float
    fence: int

    def held_at(self, now: float) -> bool:
        return self.holder is not None and now < self.expires_at


@dataclass(frozen=True)
class Decision:
    granted: bool
    # The permit after the request: the requester's when granted, else the holder's.
    permit: Permit


def request(current: Permit | None, replica: str, now: float, lease_s: float) -> Decision:
    """Grant the permit when nobody holds it, the lease is over, or ``replica`` renews it."""
    if lease_s <= 0:
        raise ValueError(f"lease must be positive, got {lease_s} s")
    if not replica:
        raise ValueError("replica must be a non-empty name")
    fence = 0 if current is None else current.fence
    if current is not None and current.held_at(now) and current.holder != replica:
        return Decision(False, current)
    renewal = current is not None and current.holder == replica and current.held_at(now)
    return Decision(True, Permit(replica, now + lease_s, fence if renewal else fence + 1))


class NotHolder(Exception):
    """A release by a replica that does not hold the permit."""

    def __init__(self, replica: str, permit: Permit | None) -> None:
        holder = None if permit is None else permit.holder
        super().__init__(
            f"{replica} does not hold the permit"
            + ("; nobody does" if holder is None else f"; {holder} does")
        )
        self.holder = holder


def release(current: Permit | None, replica: str) -> Permit:
    """The permit once ``replica`` gives it back (its fence kept for the next grant).

    A holder whose lease ran out may still release while nobody else took the permit: its
    release only says what the expiry already says.
    """
    if current is None or current.holder != replica:
        raise NotHolder(replica, current)
    return Permit(None, current.expires_at, current.fence)
