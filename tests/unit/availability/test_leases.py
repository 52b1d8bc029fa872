"""The reconciliation permit rule shared by the Flight and the REST arbiter (pure)."""

from __future__ import annotations

import pytest

from app.availability import leases
from app.availability.leases import Permit


def test_grant_refuse_renew_expire_and_fence() -> None:
    first = leases.request(None, "C1", now=100.0, lease_s=10)
    assert first == leases.Decision(True, Permit("C1", 110.0, 1))
    refused = leases.request(first.permit, "C2", now=109.9, lease_s=10)
    assert refused == leases.Decision(False, Permit("C1", 110.0, 1))
    renewed = leases.request(first.permit, "C1", now=105.0, lease_s=10)
    assert renewed == leases.Decision(True, Permit("C1", 115.0, 1))
    # Past the lease the holder is presumed dead: the next asker holds it under a new fence,
    # and so does the old holder if it asks again after its lease ran out.
    assert leases.request(renewed.permit, "C2", now=115.0, lease_s=10).permit == Permit(
        "C2", 125.0, 2
    )
    assert leases.request(renewed.permit, "C1", now=115.0, lease_s=10).permit == Permit(
        "C1", 125.0, 2
    )


def test_release_only_by_the_holder_keeps_the_fence() -> None:
    held = Permit("C1", 110.0, 3)
    with pytest.raises(leases.NotHolder, match="C2 does not hold the permit; C1 does") as error:
        leases.release(held, "C2")
    assert error.value.holder == "C1"
    free = leases.release(held, "C1")
    assert free == Permit(None, 110.0, 3)
    assert not free.held_at(100.0)
    with pytest.raises(leases.NotHolder, match="nobody does"):
        leases.release(free, "C1")
    assert leases.request(free, "C2", now=101.0, lease_s=10).permit == Permit("C2", 111.0, 4)


@pytest.mark.parametrize(
    ("replica", "lease_s", "message"),
    [("C1", 0, "lease must be positive, got 0 s"), ("", 10, "replica must be a non-empty")],
)
def test_bad_arguments(replica: str, lease_s: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        leases.request(None, replica, now=0.0, lease_s=lease_s)
