"""Replica placement: k distinct partners that allow replicas, priced like load."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.availability import PlacementError, ReplicaCandidate, place_replicas


def cand(name: str, *, hosts: bool = True, load: float = 10, cap: float = 100, price: float = 1):
    return ReplicaCandidate(name, hosts, load, cap, price)


def test_cheapest_eligible_partners_distinct_from_the_primary() -> None:
    placement = place_replicas(
        "t",
        task_load=5,
        k=2,
        primary_host="A",
        candidates=[cand("A"), cand("B", price=2), cand("C", price=1), cand("D", hosts=False)],
    )
    assert placement.hosts == ("C", "B")
    assert placement.loads == {"C": 15, "B": 15}
    assert placement.payments_per_second == {"C": 5, "B": 10}


def test_not_enough_hosts_names_every_exclusion() -> None:
    with pytest.raises(PlacementError) as error:
        place_replicas(
            "t",
            task_load=50,
            k=2,
            primary_host="A",
            candidates=[cand("A"), cand("B", hosts=False), cand("C", load=60)],
        )
    text = str(error.value)
    assert "B: its contract does not allow replica hosting" in text
    assert "C: no capacity left" in text
    assert "A: already hosts" in text


def test_existing_replicas_count_towards_k() -> None:
    placement = place_replicas(
        "t", task_load=1, k=2, primary_host="A", candidates=[cand("B"), cand("C")], existing=["B"]
    )
    assert placement.hosts == ("C",)


@given(
    st.lists(st.tuples(st.booleans(), st.floats(0, 90), st.floats(0.1, 5)), min_size=1, max_size=8),
    st.integers(0, 4),
    st.floats(0, 20),
)
def test_placement_properties(specs, k, task_load) -> None:
    candidates = [
        ReplicaCandidate(f"P{i}", hosts, load, 100.0, price)
        for i, (hosts, load, price) in enumerate(specs)
    ]
    try:
        placement = place_replicas(
            "t", task_load=task_load, k=k, primary_host="P0", candidates=candidates
        )
    except PlacementError:
        eligible = [
            c for c in candidates[1:] if c.hosts_replicas and (c.load + task_load) / c.capacity < 1
        ]
        assert len(eligible) < k
        return
    assert len(placement.hosts) == k
    assert len(set(placement.hosts)) == k and "P0" not in placement.hosts
    by_name = {c.participant: c for c in candidates}
    for host in placement.hosts:
        assert by_name[host].hosts_replicas
        assert placement.loads[host] == pytest.approx(by_name[host].load + task_load)
        assert placement.payments_per_second[host] == pytest.approx(task_load * by_name[host].price)
