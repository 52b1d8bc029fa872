"""Contracts as code: apply is idempotent, and a broken file changes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.db.session import unit_of_work
from app.federation.apply import apply_federation
from app.federation.document import FederationFileError, load_federation, parse_federation
from app.models import AuditEntry, Contract, ContractStatus, Participant, Task
from tests.support.snapshot import registry_snapshot

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "contracts" / "borealis-demo.yaml"


def test_demo_applies_then_second_apply_changes_nothing(db_url: str) -> None:
    doc = load_federation(DEMO)
    with unit_of_work(db_url) as session:
        first = apply_federation(session, doc, actor="file:demo")
    assert sorted(first.new_keys) == ["A", "B", "C", "D"]
    assert "contract A-B: created (id 1)" in first.changes
    with unit_of_work(db_url) as session:
        assert session.scalar(select(func.count()).select_from(Participant)) == 4
        assert session.scalar(select(func.count()).select_from(Task)) == 37
        contracts = list(session.scalars(select(Contract)))
        assert len(contracts) == 4
        assert {c.status for c in contracts} == {ContractStatus.active}
        cd = next(c for c in contracts if c.replica_hosting)
        assert (cd.recovery, cd.max_delay_seconds) == ("precise", 3.0)
    before = registry_snapshot(db_url)
    with unit_of_work(db_url) as session:
        second = apply_federation(session, doc, actor="file:demo")
    assert second.changes == []
    assert second.new_keys == {}
    assert registry_snapshot(db_url) == before


def test_changed_file_updates_only_what_changed(db_url: str) -> None:
    text = DEMO.read_text()
    with unit_of_work(db_url) as session:
        apply_federation(session, parse_federation(text), actor="file:demo")
    changed = text.replace(
        "{between: [A, B], price_min: 0.24, price_max: 0.26",
        "{between: [A, B], price_min: 0.25, price_max: 0.30",
    )
    with unit_of_work(db_url) as session:
        result = apply_federation(session, parse_federation(changed), actor="file:demo")
        assert result.changes == ["contract A-B: updated ['price_max', 'price_min']"]
        ab = session.scalar(select(Contract).where(Contract.id == 1))
        assert ab is not None and (ab.price_min, ab.price_max, ab.version) == (0.25, 0.30, 2)
    with unit_of_work(db_url) as session:  # audit entries are written when the change commits
        audited = session.scalar(
            select(func.count())
            .select_from(AuditEntry)
            .where(AuditEntry.action == "contract.applied")
        )
        assert audited == 5  # four created, one updated


def test_fragments_are_recorded_and_a_changed_fragment_updates_the_task(db_url: str) -> None:
    text = DEMO.read_text()
    with unit_of_work(db_url) as session:
        apply_federation(session, parse_federation(text), actor="file:demo")
    with unit_of_work(db_url) as session:
        real = {
            t.name: (t.fragment, t.params, t.inputs)
            for t in session.scalars(select(Task).where(Task.fragment.is_not(None)))
        }
        assert real == {
            "A.conns": ("generator", {"seed": 7, "rate": 60.0, "scan_rate": 6.0}, []),
            "A.q01": (
                "connections_per_source",
                {"window_seconds": 10, "threshold": 25},
                [{"task": "A.conns"}],
            ),
            "A.q02": (
                "distinct_ports_per_source",
                {"window_seconds": 10, "threshold": 10},
                [{"task": "A.conns"}],
            ),
        }
        plain = session.scalar(select(Task).where(Task.name == "A.q03"))
        assert plain is not None and (plain.fragment, plain.params, plain.inputs) == (None, {}, [])
    changed = text.replace("params: {seed: 7, rate: 60}", "params: {seed: 7, rate: 90}").replace(
        "    fragment: distinct_ports_per_source\n    inputs: [{task: A.conns}]\n", ""
    )
    assert changed.count("fragment:") == 2
    with unit_of_work(db_url) as session:
        result = apply_federation(session, parse_federation(changed), actor="file:demo")
        assert result.changes == [
            "task A.conns: updated ['params']",
            # Running nothing now, it is a declared load: synthetic, with no output stream.
            "task A.q02: updated ['fragment', 'inputs', 'output_schema', 'params', 'synthetic']",
        ]
        conns = session.scalar(select(Task).where(Task.name == "A.conns"))
        q02 = session.scalar(select(Task).where(Task.name == "A.q02"))
        assert conns is not None and conns.params["rate"] == 90.0
        assert q02 is not None and (q02.fragment, q02.params, q02.inputs) == (None, {}, [])
    with unit_of_work(db_url) as session:  # audit entries are written when the change commits
        audited = session.scalars(
            select(AuditEntry.detail).where(
                AuditEntry.action == "task.updated", AuditEntry.entity_id == conns.id
            )
        ).all()
        assert audited == [{"params": {"seed": 7, "rate": 90.0, "scan_rate": 6.0}}]
    before = registry_snapshot(db_url)
    with unit_of_work(db_url) as session:
        assert apply_federation(session, parse_federation(changed), actor="file:demo").changes == []
    assert registry_snapshot(db_url) == before


BROKEN = [
    ("participants:\n  - {name: A, capacity: 1}\n", 1, "federation", "'federation' is a required"),
    (
        "federation: x\nparticipants:\n  - {name: A, capacity: -5}\n",
        3,
        "participants[0].capacity",
        "less than or equal to the minimum of 0",
    ),
    (
        "federation: x\nparticipants:\n  - {name: A, capacity: 5}\ncontracts:\n"
        "  - {between: [A, Q], price_min: 1, price_max: 2}\n",
        5,
        "contracts[0].between[1]",
        "unknown participant 'Q'",
    ),
    (
        "federation: x\nparticipants:\n  - {name: A, capacity: 5}\n  - {name: B, capacity: 5}\n"
        "contracts:\n  - between: [A, B]\n    price_min: 3\n    price_max: 2\n",
        8,
        "contracts[0].price_max",
        "below price_min",
    ),
    (
        "federation: x\nparticipants:\n  - name: A\n    capacity: 5\n    cost_model:\n"
        "      kind: piecewise\n      points: [[0, 0], [1, 4], [2, 5]]\n",
        7,
        "participants[0].cost_model.points[1]",
        "not convex",
    ),
    ("federation: x\nparticipants: [\n", 3, "(syntax)", "invalid YAML"),
    (
        "federation: x\nparticipants:\n  - {name: A, capacity: 5}\ntasks:\n"
        "  - {name: A.q, owner: A, load: 1, fragment: connections_per_source,\n"
        "     inputs: [{task: A.q}]}\n",
        6,
        "tasks[0].inputs[0].task",
        "its own output",
    ),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), BROKEN)
def test_broken_file_names_file_line_and_field(
    text: str, line: int, field: str, words: str
) -> None:
    with pytest.raises(FederationFileError) as info:
        parse_federation(text, source="broken.yaml")
    err = info.value
    assert (err.source, err.line, err.field) == ("broken.yaml", line, field)
    assert words in err.detail
    assert str(err).startswith(f"broken.yaml:{line}: {field}: ")


def _cli(args: list[str], db_url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": db_url}
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )


def test_cli_apply_twice_and_broken_file_changes_nothing(db_url: str, tmp_path: Path) -> None:
    first = _cli(["contracts", "apply", str(DEMO)], db_url, ROOT)
    assert first.returncode == 0, first.stderr
    assert "participant A: created" in first.stdout
    before = registry_snapshot(db_url)
    second = _cli(["contracts", "apply", str(DEMO)], db_url, ROOT)
    assert second.returncode == 0, second.stderr
    assert "no changes" in second.stdout
    broken = tmp_path / "broken.yaml"
    broken.write_text(
        DEMO.read_text().replace(
            'capacity: 100, cost_model: {kind: mm1}, profile: {site: "C"}',
            'capacity: -1, cost_model: {kind: mm1}, profile: {site: "C"}',
        )
    )
    third = _cli(["contracts", "apply", str(broken)], db_url, ROOT)
    assert third.returncode == 2  # a user mistake: one line on stderr (app/cli_errors.py)
    assert f"{broken}:" in third.stderr
    assert "participants[2].capacity" in third.stderr
    assert len(third.stderr.splitlines()) == 1, third.stderr
    assert registry_snapshot(db_url) == before
