"""The reconciliation permit as a DPC copy holds it (``spark_jobs.runtime.dpc.PermitHold``):
renewed while the redo runs, so a redo longer than the registry's lease keeps it, and lost
(the redo must stop) when the arbiter gives it to another copy."""

from __future__ import annotations

from app.availability import leases
from spark_jobs.runtime.dpc import PermitHold

LEASE_S = 10.0


class Arbiter:
    """The registry's rule (``app.availability.leases``) on a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.permit: leases.Permit | None = None
        self.reachable = True
        self.asked: list[str] = []

    def request(self, replica: str) -> bool | None:
        if not self.reachable:
            return None
        self.asked.append(replica)
        decision = leases.request(self.permit, replica, self.now, LEASE_S)
        self.permit = decision.permit if decision.granted else self.permit
        return decision.granted

    def release(self, replica: str) -> None:
        self.permit = leases.release(self.permit, replica)


def hold(arbiter: Arbiter, replica: str) -> PermitHold:
    return PermitHold(
        "O.x",
        lambda _name: arbiter.request(replica),
        lambda _name: arbiter.release(replica),
        renew_every_s=2.0,
        clock=lambda: arbiter.now,
    )


def test_a_redo_longer_than_the_lease_keeps_the_permit_and_the_other_copy_waits() -> None:
    arbiter = Arbiter()
    t, u = hold(arbiter, "T"), hold(arbiter, "U")
    assert t.acquire() and not u.acquire()
    # Polled every 0.2 s for 80 s, the length of a redo seen at load 7-14 (the lease is 10 s).
    for step in range(400):
        arbiter.now = step * 0.2
        assert t.keep(), arbiter.now
        assert not u.acquire(), f"U got the permit at {arbiter.now} s while T reconciled"
    # Renewed every 2 s, not at every poll.
    assert 35 <= arbiter.asked.count("T") <= 45
    t.release()
    assert not t.held and u.acquire()


def test_a_refused_renewal_means_the_permit_is_lost() -> None:
    arbiter = Arbiter()
    t, u = hold(arbiter, "T"), hold(arbiter, "U")
    assert t.acquire()
    # T's poller stalls past the lease; U takes the permit.
    arbiter.now = LEASE_S + 1
    assert u.acquire()
    assert not t.keep() and not t.held and t.lost == 1
    # T does not release what it no longer holds (the arbiter would refuse it: U holds it).
    t.release()
    assert arbiter.permit is not None and arbiter.permit.holder == "U"


def test_an_unreachable_arbiter_leaves_the_granted_lease_running() -> None:
    arbiter = Arbiter()
    t = hold(arbiter, "T")
    assert t.acquire()
    arbiter.reachable = False
    arbiter.now = 3.0
    assert t.keep() and t.held
    arbiter.reachable = True
    arbiter.now = 3.2
    assert t.keep() and arbiter.permit is not None and arbiter.permit.expires_at == 13.2
