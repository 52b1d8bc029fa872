"""A DPC node end to end in one process: tentative output, reconciliation, corrections."""

from __future__ import annotations

from app.availability import (
    DelayStrategy,
    DPCNode,
    Message,
    NodeState,
    Row,
    StreamView,
    WindowCount,
)

BUCKET = 100


def make_node(**options) -> DPCNode:
    return DPCNode(
        "N",
        ["a", "b"],
        WindowCount(200, BUCKET),
        bucket_ms=BUCKET,
        delay_budget_ms=300,
        **options,
    )


def feed(node: DPCNode, name: str, lo: int, hi: int) -> None:
    """Rows every 10 ms in [lo, hi), then a boundary at hi."""
    for t in range(lo, hi, 10):
        node.receive(name, Message.stable(Row(t, f"{name}{t}", (f"k{t % 3}", 1))))
    node.receive(name, Message.boundary(hi))


def run(node: DPCNode, outage: tuple[int, int] | None, until: int = 2000) -> StreamView:
    view = StreamView()
    fed = {"a": 0, "b": 0}
    for now in range(0, until + 1, 50):
        for name in ("a", "b"):
            if name == "b" and outage and outage[0] <= now < outage[1]:
                continue
            feed(node, name, fed[name], now)
            fed[name] = now
        for message in node.tick(now):
            view.apply(message, now)
    return view


def test_failure_free_output_is_stable_with_boundaries() -> None:
    node = make_node()
    view = run(node, None)
    assert node.state is NodeState.STABLE
    assert view.tentative_total == 0 and view.undos == 0
    # Windows of 200 ms over 2 s, all closed by the boundary at 2000: 10 windows x 3 keys.
    assert len(view.stable) == 30
    # t = 0, 30, ..., 180 have key k0: 7 rows per input, two inputs.
    assert view.stable[0].payload == ("k0", 14, 14)
    assert view.boundary == 2000


def test_outage_longer_than_budget_is_tentative_then_corrected() -> None:
    reference = run(make_node(), None)
    node = make_node()
    view = run(node, (400, 1200))
    states = [state for state, _ in node.history]
    assert states == [
        NodeState.STABLE,
        NodeState.UP_FAILURE,
        NodeState.STABILIZATION,
        NodeState.STABLE,
    ]
    assert view.tentative_total > 0
    assert view.undos == 1 and view.rec_dones == 1 and view.corrections > 0
    assert view.stable == reference.stable
    assert view.tentative == []
    # Input b's last boundary before the cut was 350, so bucket [300, 400) is the first
    # incomplete one: due at 400, it waited the whole budget.
    went_tentative = node.history[1][1]
    assert went_tentative == 400 + 300


def test_outage_shorter_than_budget_costs_no_tentative_rows() -> None:
    reference = run(make_node(), None)
    view = run(make_node(), (400, 650))
    assert view.tentative_total == 0
    assert view.stable == reference.stable


def test_delay_first_produces_more_tentative_rows_than_delay_each() -> None:
    each = run(make_node(strategy=DelayStrategy.DELAY_EACH), (400, 1200))
    first = run(make_node(strategy=DelayStrategy.DELAY_FIRST), (400, 1200))
    assert first.tentative_total > each.tentative_total
    assert first.stable == each.stable


def test_refused_permission_keeps_the_node_in_up_failure() -> None:
    allowed = {"yes": False}
    node = make_node(request_permission=lambda _name: allowed["yes"])
    view = run(node, (400, 1200), until=1600)
    assert node.state is NodeState.UP_FAILURE
    assert view.rec_dones == 0
    allowed["yes"] = True
    for message in node.tick(1650):
        view.apply(message, 1650)
    assert node.state is NodeState.STABLE
    assert view.rec_dones == 1


def test_reconciliation_spread_over_ticks_passes_through_stabilization() -> None:
    node = make_node(replay_per_tick=1)
    view = run(node, (400, 1200))
    stabilizing = [t for state, t in node.history if state is NodeState.STABILIZATION]
    back = [t for state, t in node.history if state is NodeState.STABLE][1:]
    assert stabilizing and back and back[0] > stabilizing[0]
    assert (view.undos, view.rec_dones) == (1, 1)
    assert view.stable == run(make_node(), None).stable


def test_restore_resumes_after_the_checkpoint() -> None:
    node = make_node()
    run(node, None, until=1000)
    checkpoint = node.checkpoint
    fresh = make_node()
    fresh.restore(checkpoint)
    assert fresh.sunion.next_bucket == checkpoint.next_bucket
    assert fresh.operator.snapshot() == node.operator.snapshot()
