from __future__ import annotations

from pathlib import Path

from app.federation.document import load_federation

ROOT = Path(__file__).resolve().parents[3]


def test_demo_document_reads_as_the_borealis_demo() -> None:
    doc = load_federation(ROOT / "contracts" / "borealis-demo.yaml")
    assert [p.name for p in doc.participants] == ["A", "B", "C", "D"]
    assert doc.participant("D").joins_at == 240
    assert {c.pair() for c in doc.contracts} == {
        frozenset("AB"),
        frozenset("AC"),
        frozenset("BC"),
        frozenset("CD"),
    }
    load = {name: sum(t.load for t in doc.tasks if t.owner == name) for name in "ABCD"}
    assert load == {"A": 130, "B": 30, "C": 20, "D": 0}
    assert [(e.at, e.event) for e in doc.timeline] == [(120, "scale_load"), (240, "join")]
    assert doc.simulation.offer_interval_seconds == 7


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    import pytest

    from app.federation.document import FederationFileError

    with pytest.raises(FederationFileError, match="cannot read"):
        load_federation(tmp_path / "nope.yaml")
