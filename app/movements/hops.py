"""Which hops of a task's journey are being paid for right now. Pure.

Load can travel over several hops (A to B to C, DESIGN.md "Moves"): A pays B under the A-B
contract, and B, having passed the task on, pays C under B-C, while still being paid by A. A move
back along the chain (C to B) ends the B-C hop; a move home ends every hop.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Hop:
    payer: int
    payee: int
    contract_id: int | None
    price: float


@dataclass(frozen=True)
class CommittedMove:
    src: int
    dst: int
    contract_id: int | None
    price: float | None


def active_hops(owner: int, moves: Iterable[CommittedMove]) -> list[Hop]:
    """The paid hops after replaying a task's committed moves in order."""
    chain: list[Hop] = []
    for move in moves:
        chain = after_move(owner, chain, move)
    return chain


def after_move(owner: int, chain: list[Hop], move: CommittedMove) -> list[Hop]:
    """The paid hops once ``move`` is committed on top of ``chain``."""
    if move.dst == owner:
        return []
    # Moving back to an earlier host unwinds every hop after it.
    earlier = [i for i, hop in enumerate(chain) if hop.payer == move.dst]
    if earlier:
        return chain[: earlier[0]]
    if move.contract_id is None or move.price is None:
        # A relocation outside any contract (an admin's, say) is not a sale: nobody pays.
        return list(chain)
    return [
        *chain,
        Hop(payer=move.src, payee=move.dst, contract_id=move.contract_id, price=move.price),
    ]
