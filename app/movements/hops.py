"""Which hops of a task's journey are being paid for right now. Pure.

Load can travel over several hops (A to B to C, DESIGN.md "Moves"): A pays B under the A-B
contract, and B, having passed the task on, pays C under B-C, while still being paid by A. A move
back along the chain (C to B) ends the B-C hop; a move home ends every hop.

A relocation outside the market (a failover, a replica switch, a reconciliation) is no sale by
the host it leaves, which has usually failed: its target is the owner or one of the owner's
partners, and from then on the owner pays the target directly under their contract, in place
of the whole chain.
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
    # Outside the market: the owner pays ``dst`` directly, the chain it replaces is paid no more.
    direct: bool = False


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
    if move.direct:
        if move.contract_id is None or move.price is None:
            return []
        return [Hop(payer=owner, payee=move.dst, contract_id=move.contract_id, price=move.price)]
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
