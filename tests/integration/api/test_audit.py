"""The audit API and the audit log's hash chain, on SQLite and PostgreSQL.

Tampering goes straight to the database, as an attacker with the tables' owner rights would:
the append-only triggers are switched off first, which is what such an attacker can do too.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from typer.testing import CliRunner

from app.audit import service as audit
from app.audit.chain import ChainFields, entry_hash
from app.audit.verify import verify
from app.cli import cli
from app.db.migrate import upgrade
from app.db.session import dispose_engines, get_engine, unit_of_work
from app.models import AuditEntry, AuditSubject
from app.settings import get_settings
from tests.integration.api.conftest import Api
from tests.support.components import postgres_problem, postgres_url, require
from tests.support.databases import BACKENDS, _truncate_all

TRIGGERS = [
    ("audit_log", "update"),
    ("audit_log", "delete"),
    ("audit_subjects", "update"),
    ("audit_subjects", "delete"),
    ("audit_head", "delete"),
]


def contract_between_a_and_b(api: Api) -> dict[str, Any]:
    contract = api.propose("A", "B")
    accepted = api.post("B", f"/v1/contracts/{contract['id']}/accept", {"version": 1})
    assert accepted.status_code == 200, accepted.text
    return accepted.json()


def audit_pages(api: Api, who: str, limit: int) -> list[list[dict[str, Any]]]:
    pages, cursor = [], None
    while True:
        params: dict[str, Any] = {"limit": limit} | ({"cursor": cursor} if cursor else {})
        response = api.get(who, "/v1/audit", params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def run_verify(db_url: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setenv("DATABASE_URL", db_url)
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(cli, ["audit", "verify"], env={"COLUMNS": "300"})
    finally:
        get_settings.cache_clear()
    return result.exit_code, " ".join(result.output.split())


@contextmanager
def triggers_off(db_url: str) -> Iterator[sa.Connection]:
    """A connection that may change the audit tables: the triggers are what it switches off."""
    engine = get_engine(db_url)
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
            yield conn
            return
        sql = {
            (t, e): conn.execute(
                sa.text("SELECT sql FROM sqlite_master WHERE type='trigger' AND name=:n"),
                {"n": f"{t}_no_{e}"},
            ).scalar_one()
            for t, e in TRIGGERS
        }
        for table, event in TRIGGERS:
            conn.execute(sa.text(f"DROP TRIGGER {table}_no_{event}"))
        yield conn
        for statement in sql.values():
            conn.execute(sa.text(statement))


def test_admin_reads_every_entry_and_a_participant_only_those_about_itself(abc: Api) -> None:
    contract = contract_between_a_and_b(abc)
    assert abc.post("C", "/v1/tasks", {"name": "C.c1", "load": 1.0}).status_code == 201

    everything = [e for page in audit_pages(abc, "admin", limit=500) for e in page]
    actions = [(e["actor"], e["action"]) for e in everything]
    assert actions[:3] == [
        ("participant:C", "task.created"),
        ("participant:B", "contract.accepted"),
        ("participant:A", "contract.proposed"),
    ]
    assert [a for _, a in actions[3:]] == ["participant.created"] * 3

    def seen_by(who: str) -> list[tuple[str, int | None]]:
        return [(e["action"], e["entity_id"]) for e in abc.get(who, "/v1/audit").json()["items"]]

    a_id, b_id, c_id = (e["entity_id"] for e in reversed(everything[3:]))
    assert seen_by("A") == [
        ("contract.accepted", contract["id"]),
        ("contract.proposed", contract["id"]),
        ("participant.created", a_id),
    ]
    assert seen_by("B") == [
        ("contract.accepted", contract["id"]),
        ("contract.proposed", contract["id"]),
        ("participant.created", b_id),
    ]
    assert seen_by("C")[0][0] == "task.created" and ("participant.created", c_id) in seen_by("C")
    assert not {("contract.proposed", contract["id"])} & set(seen_by("C"))
    first = everything[0]
    assert first["participants"] == ["C"] and len(first["hash"]) == 64
    assert everything[1]["participants"] == ["A", "B"]
    assert everything[1]["prev_hash"] == everything[2]["hash"]


def test_pages_follow_the_cursor_without_gaps_or_repeats(abc: Api) -> None:
    for n in range(4):
        assert abc.post("A", "/v1/tasks", {"name": f"A.a{n}", "load": 1.0}).status_code == 201
    whole = abc.get("admin", "/v1/audit").json()["items"]
    pages = audit_pages(abc, "admin", limit=3)
    assert [len(p) for p in pages] == [3, 3, 1]
    assert [e["id"] for p in pages for e in p] == [e["id"] for e in whole]
    mine = audit_pages(abc, "A", limit=2)
    assert [len(p) for p in mine] == [2, 2, 1]
    assert [e["action"] for p in mine for e in p] == ["task.created"] * 4 + ["participant.created"]
    assert abc.get("A", "/v1/audit", params={"limit": 0}).status_code == 422
    assert abc.get("A", "/v1/audit", params={"limit": 501}).status_code == 422
    assert abc.client.get("/v1/audit").status_code == 401


def test_the_database_refuses_to_change_or_delete_audit_entries(abc: Api, db_url: str) -> None:
    contract_between_a_and_b(abc)
    engine = get_engine(db_url)
    for statement in (
        "UPDATE audit_log SET actor = 'participant:C'",
        "DELETE FROM audit_log",
        "UPDATE audit_subjects SET participant_id = 99",
        "DELETE FROM audit_subjects",
        "DELETE FROM audit_head",
    ):
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(sa.text(statement))
    with unit_of_work(db_url) as session:
        assert verify(session).intact


def test_verify_names_the_first_entry_whose_content_changed(
    abc: Api, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract_between_a_and_b(abc)
    assert run_verify(db_url, monkeypatch) == (0, run_verify(db_url, monkeypatch)[1])
    code, out = run_verify(db_url, monkeypatch)
    assert code == 0 and out.startswith("audit chain intact: 5 entries, head ")
    with triggers_off(db_url) as conn:
        proposed = conn.execute(
            sa.text("SELECT id FROM audit_log WHERE action = 'contract.proposed'")
        ).scalar_one()
        # The attacker rewrites who proposed the contract, and even the entry's own hash field
        # cannot be made to fit: the next entry holds the old one.
        conn.execute(
            sa.text("UPDATE audit_log SET actor = 'participant:C' WHERE id = :id"), {"id": proposed}
        )
    code, out = run_verify(db_url, monkeypatch)
    assert code == 1
    assert out.startswith(f"audit chain broken at entry #{proposed}: its content changed")


def test_verify_finds_a_removed_entry_and_a_cut_end(
    abc: Api, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    contract_between_a_and_b(abc)
    with triggers_off(db_url) as conn:
        ids = conn.execute(sa.text("SELECT id FROM audit_log ORDER BY id")).scalars().all()
        conn.execute(sa.text("DELETE FROM audit_subjects WHERE audit_id = :id"), {"id": ids[1]})
        conn.execute(sa.text("DELETE FROM audit_log WHERE id = :id"), {"id": ids[1]})
    code, out = run_verify(db_url, monkeypatch)
    assert (code, out.split(":")[0]) == (1, f"audit chain broken at entry #{ids[2]}")
    assert "an entry before it was removed" in out

    with triggers_off(db_url) as conn:  # now cut everything after the first entry
        conn.execute(sa.text("DELETE FROM audit_subjects WHERE audit_id > :id"), {"id": ids[0]})
        conn.execute(sa.text("DELETE FROM audit_log WHERE id > :id"), {"id": ids[0]})
    with unit_of_work(db_url) as session:
        verdict = verify(session)
    assert verdict.broken is not None and verdict.broken.entry_id is None
    assert f"the log ends at entry #{ids[0]}" in verdict.broken.problem


def test_a_rewritten_last_entry_with_a_recomputed_hash_is_found_by_the_head(
    abc: Api, db_url: str
) -> None:
    """An attacker who knows the hash format rewrites the newest entry and recomputes its hash:
    no later entry holds the old one, but the chain's head does."""
    contract_between_a_and_b(abc)
    with unit_of_work(db_url) as session:
        last = session.scalars(sa.select(AuditEntry).order_by(AuditEntry.id.desc())).first()
        assert last is not None
        subjects = session.scalars(
            sa.select(AuditSubject.participant_id).where(AuditSubject.audit_id == last.id)
        ).all()
        forged = ChainFields(
            id=last.id,
            at=last.at,
            actor="participant:C",
            action=last.action,
            entity_type=last.entity_type,
            entity_id=last.entity_id,
            detail=last.detail,
            subjects=subjects,
        )
        last_id, prev_hash = last.id, last.prev_hash
    with triggers_off(db_url) as conn:
        conn.execute(
            sa.text("UPDATE audit_log SET actor = :a, hash = :h WHERE id = :id"),
            {"a": forged.actor, "h": entry_hash(forged, prev_hash), "id": last_id},
        )
    with unit_of_work(db_url) as session:
        verdict = verify(session)
    assert verdict.broken is not None and verdict.broken.entry_id is None
    assert "the last entry was rewritten" in verdict.broken.problem


def test_a_changed_subject_breaks_the_chain(abc: Api, db_url: str) -> None:
    """Hiding an entry from a participant (or showing it to another) is tampering too."""
    contract_between_a_and_b(abc)
    with triggers_off(db_url) as conn:
        target = conn.execute(
            sa.text("SELECT id FROM audit_log WHERE action = 'contract.accepted'")
        ).scalar_one()
        conn.execute(sa.text("DELETE FROM audit_subjects WHERE audit_id = :id"), {"id": target})
    with unit_of_work(db_url) as session:
        verdict = verify(session)
    assert verdict.broken is not None and verdict.broken.entry_id == target


def record_in_own_transaction(db_url: str, action: str) -> None:
    with unit_of_work(db_url) as session:
        audit.record(session, actor="system", action=action, entity_type="test", entity_id=None)


def test_concurrent_writers_extend_the_chains(db_url: str) -> None:
    """Eight threads, each committing audited transactions at once: unbroken chains, with no
    entry lost, none forked off the same predecessor, and ids from one sequence."""
    writers, each = 8, 6
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for k in range(each):
                with unit_of_work(db_url) as session:
                    for part in range(2):
                        audit.record(
                            session,
                            actor="system",
                            action="test.concurrent",
                            entity_type="test",
                            entity_id=None,
                            detail={"writer": n, "k": k, "part": part},
                        )
        except BaseException as exc:  # reported below, with the thread's own traceback lost
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with unit_of_work(db_url) as session:
        verdict = verify(session)
        rows = session.execute(sa.text("SELECT id, chain, detail FROM audit_log ORDER BY id")).all()
    assert verdict.intact and verdict.entries == writers * each * 2
    assert [r.id for r in rows] == list(range(1, writers * each * 2 + 1))
    # A transaction's entries stay together in one chain, in the order they were recorded.
    by_transaction: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for row in rows:
        detail = row.detail if isinstance(row.detail, dict) else json.loads(row.detail)
        by_transaction.setdefault((detail["writer"], detail["k"]), []).append(
            (row.chain, detail["part"])
        )
    assert all(
        len({chain for chain, _ in parts}) == 1 and [p for _, p in parts] == [0, 1]
        for parts in by_transaction.values()
    )
    assert set(verdict.ends) == {r.chain for r in rows}


@pytest.mark.postgres
def test_a_writer_does_not_wait_for_another_holding_a_chain(postgres_database: str) -> None:
    """While one transaction holds a chain's head (as a writer does from its sealing to its
    commit), another audited commit takes the next chain instead of queueing behind it; with
    every head held, it waits for one and then goes on."""
    _truncate_all(postgres_database)
    record_in_own_transaction(postgres_database, "test.first")  # creates the heads
    engine = get_engine(postgres_database)
    with engine.connect() as holder:
        holder.execute(sa.text("SELECT id FROM audit_head WHERE id = 1 FOR UPDATE"))
        # With one head, this commit would queue on the holder's lock until lock_timeout.
        with unit_of_work(postgres_database) as session:
            session.execute(sa.text("SET LOCAL lock_timeout = '3s'"))
            audit.record(
                session, actor="system", action="test.beside", entity_type="test", entity_id=None
            )
        holder.rollback()
    with unit_of_work(postgres_database) as session:
        chains = dict(session.execute(sa.text("SELECT action, chain FROM audit_log")).all())
    assert chains == {"test.first": 1, "test.beside": 2}

    done = threading.Event()

    def wait_for_a_head() -> None:
        record_in_own_transaction(postgres_database, "test.waited")
        done.set()

    with engine.connect() as holder:
        holder.execute(sa.text("SELECT id FROM audit_head FOR UPDATE"))
        writer = threading.Thread(target=wait_for_a_head)
        writer.start()
        assert not done.wait(0.5)  # every chain busy: it waits...
        holder.rollback()
        writer.join(timeout=10)
    assert done.is_set()  # ...and commits once a head is free
    with unit_of_work(postgres_database) as session:
        verdict = verify(session)
    assert (verdict.intact, verdict.entries) == (True, 3)


def test_verify_walks_every_chain(db_url: str) -> None:
    """Entries of two chains interleaved by id: each chain verifies on its own, and tampering
    with either is found, named by entry or by the chain whose end was cut."""
    record_in_own_transaction(db_url, "test.one")
    with triggers_off(db_url) as conn:  # a second chain, as a concurrent writer would start it
        conn.execute(sa.text("UPDATE audit_head SET id = 99 WHERE id = 1"))
    record_in_own_transaction(db_url, "test.two")  # the first free head: 2, from genesis
    with triggers_off(db_url) as conn:
        conn.execute(sa.text("UPDATE audit_head SET id = 1 WHERE id = 99"))
    record_in_own_transaction(db_url, "test.three")  # chain 1 again, after test.one
    with unit_of_work(db_url) as session:
        verdict = verify(session)
        rows = session.execute(sa.text("SELECT id, chain, action FROM audit_log ORDER BY id"))
        assert [(r.id, r.chain) for r in rows] == [(1, 1), (2, 2), (3, 1)]
    assert verdict.intact and verdict.entries == 3
    assert set(verdict.ends) == {1, 2} and verdict.ends[1][0] == 3

    with triggers_off(db_url) as conn:  # cut chain 2's only entry
        conn.execute(sa.text("DELETE FROM audit_subjects WHERE audit_id = 2"))
        conn.execute(sa.text("DELETE FROM audit_log WHERE id = 2"))
    with unit_of_work(db_url) as session:
        verdict = verify(session)
    assert verdict.broken is not None and verdict.broken.entry_id is None
    assert "chain 2 has no entry" in verdict.broken.problem
    assert "entries were removed from the end" in verdict.broken.problem

    with triggers_off(db_url) as conn:  # move chain 1's last entry into chain 2
        conn.execute(sa.text("UPDATE audit_log SET chain = 2 WHERE id = 3"))
    with unit_of_work(db_url) as session:
        verdict = verify(session)
    assert verdict.broken is not None and verdict.broken.entry_id == 3
    assert "in chain 2" in verdict.broken.problem


def test_a_rolled_back_transaction_leaves_no_entry(db_url: str) -> None:
    with pytest.raises(RuntimeError), unit_of_work(db_url) as session:
        audit.record(
            session, actor="system", action="test.lost", entity_type="test", entity_id=None
        )
        raise RuntimeError("the change fails")
    with unit_of_work(db_url) as session:
        assert verify(session).entries == 0


@contextmanager
def scratch_database(backend: str, tmp_path: Path) -> Iterator[str]:
    """An empty database of its own (the shared test database is already migrated)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'old.db'}"
        return
    server_url = postgres_url()
    require("PostgreSQL", postgres_problem(server_url))
    name = f"fedload_migration_{uuid.uuid4().hex[:8]}"
    server = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with server.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        server.dispose()


@pytest.mark.parametrize("backend", BACKENDS)
def test_migration_0008_chains_the_entries_written_before_it(backend: str, tmp_path: Path) -> None:
    """A registry with audit entries from before the chain: the migration gives each its
    subjects and hashes in id order, and the service extends that chain."""
    with scratch_database(backend, tmp_path) as url:
        migrate_old_entries(url)


def migrate_old_entries(url: str) -> None:
    upgrade(url, "0005")
    old = get_engine(url)
    with old.begin() as conn:
        for name in ("A", "B"):
            conn.execute(
                sa.text(
                    "INSERT INTO participants (name, capacity, profile, cost_model, api_key_hash,"
                    " status, liveness, created_at, updated_at) VALUES (:n, 10, '{}', '{}', :h,"
                    " 'active', 'unknown', '2026-11-01 10:00:00', '2026-11-01 10:00:00')"
                ),
                {"n": name, "h": name * 64},
            )
        for actor, action, entity_id, detail in [
            ("admin", "participant.created", 1, '{"name": "A", "capacity": 10.0}'),
            ("admin", "participant.created", 2, '{"name": "B"}'),
            ("participant:B", "participant.online", 1, "{}"),
        ]:
            conn.execute(
                sa.text(
                    "INSERT INTO audit_log (at, actor, action, entity_type, entity_id, detail)"
                    " VALUES ('2026-11-01 10:00:00.250000', :a, :x, 'participant', :e, :d)"
                ),
                {"a": actor, "x": action, "e": entity_id, "d": detail},
            )
    old.dispose()
    upgrade(url)
    with unit_of_work(url) as session:
        verdict = verify(session)
        assert (verdict.intact, verdict.entries) == (True, 3)
        subjects = session.execute(
            sa.text("SELECT audit_id, participant_id FROM audit_subjects ORDER BY 1, 2")
        ).all()
        assert [tuple(r) for r in subjects] == [(1, 1), (2, 2), (3, 1), (3, 2)]
        audit.record(
            session, actor="system", action="test.after", entity_type="test", entity_id=None
        )
    with unit_of_work(url) as session:
        verdict = verify(session)
        assert (verdict.intact, verdict.entries) == (True, 4)
        # Migration 0010: the old entries' chain goes on (the sequence moved past their ids),
        # beside fifteen new chains.
        after = session.execute(
            sa.text("SELECT id, chain FROM audit_log WHERE action = 'test.after'")
        ).one()
        assert tuple(after) == (4, 1)
        assert session.scalar(sa.text("SELECT count(*) FROM audit_head")) == 16
    dispose_engines(url)
