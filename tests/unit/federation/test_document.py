from __future__ import annotations

from pathlib import Path

import pytest

from app.federation.document import FederationFileError, load_federation, parse_federation

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
    assert len(doc.tasks) == 37
    assert [(e.at, e.event) for e in doc.timeline] == [(120, "scale_load"), (240, "join")]
    assert doc.simulation.offer_interval_seconds == 7


def test_demo_names_exactly_its_real_fragments() -> None:
    doc = load_federation(ROOT / "contracts" / "borealis-demo.yaml")
    real = {t.name: t for t in doc.tasks if t.fragment is not None}
    assert sorted(real) == ["A.conns", "A.q01", "A.q02"]
    conns, q01, q02 = real["A.conns"], real["A.q01"], real["A.q02"]
    assert (conns.owner, conns.load, conns.fragment, conns.inputs) == ("A", 0, "generator", ())
    assert conns.params == {"seed": 7, "rate": 60.0, "scan_rate": 6.0}
    assert (q01.fragment, q01.inputs, q01.load) == ("connections_per_source", ("A.conns",), 5)
    assert q01.params == {"window_seconds": 10, "threshold": 25}
    assert (q02.fragment, q02.inputs, q02.load) == ("distinct_ports_per_source", ("A.conns",), 5)
    assert q02.params == {"window_seconds": 10, "threshold": 10}
    for task in doc.tasks:
        if task.fragment is None:
            assert (task.params, task.inputs) == ({}, ())


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FederationFileError, match="cannot read"):
        load_federation(tmp_path / "nope.yaml")


HEAD = (
    "federation: x\n"
    "participants:\n"
    "  - {name: A, capacity: 100}\n"
    "  - {name: B, capacity: 100}\n"
    "tasks:\n"
    "  - {name: A.src, owner: A, load: 0, fragment: generator}\n"  # line 6
    "  - {name: B.src, owner: B, load: 0, fragment: generator}\n"  # line 7
)

BROKEN = [
    (
        "  - {name: A.q, owner: A, load: 5, fragment: magic}\n",
        8,
        "tasks[2].fragment",
        "is not one of",
    ),
    (
        "  - name: A.q\n    owner: A\n    load: 5\n    fragment: connections_per_source\n"
        "    inputs: [{task: A.src}]\n    params:\n      threshold: 5\n      window_seconds: 0\n",
        15,
        "tasks[2].params.window_seconds",
        "at least 1",
    ),
    (
        "  - name: A.q\n    owner: A\n    load: 5\n    fragment: connections_per_source\n"
        "    params: {windows: 3}\n    inputs: [{task: A.src}]\n",
        12,
        "tasks[2].params.windows",
        "no parameter 'windows'",
    ),
    (
        "  - name: A.q\n    owner: A\n    load: 5\n    fragment: connections_per_source\n"
        "    inputs:\n      - {task: B.src}\n",
        13,
        "tasks[2].inputs[0].task",
        "A owns no task named 'B.src'",
    ),
    (
        "  - name: A.q\n    owner: A\n    load: 5\n    fragment: connections_per_source\n",
        8,
        "tasks[2].inputs",
        "at least 1 input",
    ),
    (
        "  - name: A.q\n    owner: A\n    load: 5\n    fragment: prefix_scanners\n"
        "    inputs: [{task: A.src}]\n",
        12,
        "tasks[2].inputs[0].task",
        "reads port_counts",
    ),
    (
        "  - {name: A.q, owner: A, load: 5, params: {seed: 1}}\n",
        8,
        "tasks[2].params",
        "names none",
    ),
    (
        "  - {name: A.q, owner: A, load: 5, fragment: connections_per_source, "
        "inputs: [{name: A.src}]}\n",
        8,
        "tasks[2].inputs[0].task",
        "'task' is a required property",
    ),
    # Per-owner names (issue 15): a task's name is "<owner>.<local>", the local part dot-free.
    ("  - {name: B.q, owner: A, load: 5}\n", 8, "tasks[2].name", "must start with 'A.'"),
    ("  - {name: q, owner: A, load: 5}\n", 8, "tasks[2].name", "must start with 'A.'"),
    ("  - {name: A.b.q, owner: A, load: 5}\n", 8, "tasks[2].name", "no '.'"),
]


@pytest.mark.parametrize(("tail", "line", "field", "words"), BROKEN)
def test_bad_fragment_in_a_file_names_file_line_and_field(
    tail: str, line: int, field: str, words: str
) -> None:
    with pytest.raises(FederationFileError) as info:
        parse_federation(HEAD + tail, source="fed.yaml")
    err = info.value
    assert (err.source, err.line, err.field) == ("fed.yaml", line, field), str(err)
    assert words in err.detail
    assert str(err).startswith(f"fed.yaml:{line}: {field}: ")


def test_an_input_may_be_listed_after_its_reader() -> None:
    doc = parse_federation(
        "federation: x\nparticipants: [{name: A, capacity: 10}]\ntasks:\n"
        "  - {name: A.q, owner: A, load: 1, fragment: distinct_ports_per_source, "
        "inputs: [{task: A.src}]}\n"
        "  - {name: A.src, owner: A, load: 0, fragment: generator, params: {seed: 3}}\n"
    )
    assert [(t.name, t.inputs) for t in doc.tasks] == [("A.q", ("A.src",)), ("A.src", ())]
    assert doc.tasks[1].params["seed"] == 3
