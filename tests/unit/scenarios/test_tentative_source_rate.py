"""The tentative scenario's source rate knob (``TentativeOptions.source_rate``): every
generator of the federation, and only those, runs at the rate asked."""

from __future__ import annotations

import pytest

from app.federation.document import load_federation
from spark_jobs.scenarios.tentative import FEDERATION, with_source_rate


def test_every_generator_and_nothing_else_takes_the_rate() -> None:
    doc = load_federation(FEDERATION)
    faster = with_source_rate(doc, 1000)
    rates = {t.name: t.params.get("rate") for t in faster.tasks}
    assert rates == {"O.conns": 1000, "O.far": 1000, "O.x": None}
    # Everything else about the sources stays: their seeds make the reference reproducible.
    seeds = {t.name: t.params.get("seed") for t in faster.tasks if t.fragment == "generator"}
    assert seeds == {"O.conns": 21, "O.far": 22}
    assert {t.name: t.params.get("rate") for t in doc.tasks}["O.conns"] == 30


@pytest.mark.parametrize("rate", [0, -5])
def test_a_rate_that_is_not_positive_is_refused(rate: int) -> None:
    with pytest.raises(ValueError, match="source_rate must be a positive number"):
        with_source_rate(load_federation(FEDERATION), rate)
