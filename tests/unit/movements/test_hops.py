from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from app.movements.hops import CommittedMove, Hop, active_hops

A, B, C, D = 1, 2, 3, 4


def move(src: int, dst: int, contract: int | None = 10, price: float | None = 1.0) -> CommittedMove:
    return CommittedMove(src=src, dst=dst, contract_id=contract, price=price)


def test_chain_of_two_hops_pays_both() -> None:
    hops = active_hops(A, [move(A, B, 1, 0.5), move(B, C, 2, 0.4)])
    assert hops == [Hop(A, B, 1, 0.5), Hop(B, C, 2, 0.4)]


def test_move_back_unwinds_the_later_hop() -> None:
    assert active_hops(A, [move(A, B, 1), move(B, C, 2), move(C, B, 2)]) == [Hop(A, B, 1, 1.0)]


def test_move_home_ends_every_hop() -> None:
    assert active_hops(A, [move(A, B), move(B, C), move(C, A)]) == []


def test_unpaid_relocation_adds_no_hop() -> None:
    assert active_hops(A, [move(A, B, 1), move(B, D, None, None)]) == [Hop(A, B, 1, 1.0)]


def test_a_failover_replaces_the_chain_with_the_owner_paying_the_new_host() -> None:
    # A sold to B, B to C; C fails and D, A's partner holding the replica, takes over: A pays D
    # under A-D, and neither B nor C is paid any more.
    failover = CommittedMove(src=C, dst=D, contract_id=7, price=0.3, direct=True)
    assert active_hops(A, [move(A, B, 1), move(B, C, 2), failover]) == [Hop(A, D, 7, 0.3)]
    # A later market move from D builds the chain on from there.
    assert active_hops(A, [move(A, B, 1), failover, move(D, C, 2, 0.2)]) == [
        Hop(A, D, 7, 0.3),
        Hop(D, C, 2, 0.2),
    ]


def test_a_relocation_home_outside_the_market_ends_every_hop() -> None:
    home = CommittedMove(src=B, dst=A, contract_id=None, price=None, direct=True)
    assert active_hops(A, [move(A, B, 1), home]) == []


@given(st.lists(st.sampled_from([B, C, D, A]), max_size=12))
def test_chain_is_a_path_from_the_owner_without_repeats(hosts: list[int]) -> None:
    moves, here = [], A
    for nxt in hosts:
        if nxt != here:
            moves.append(move(here, nxt))
            here = nxt
    hops = active_hops(A, moves)
    if hops:
        assert hops[0].payer == A
        assert hops[-1].payee == here
        for left, right in itertools.pairwise(hops):
            assert left.payee == right.payer
        payees = [h.payee for h in hops]
        assert len(set(payees)) == len(payees) and A not in payees
    else:
        assert here == A
