"""A GET reads outside a transaction on PostgreSQL, and redoes its work in one if it must write.

``app.db.session.autocommit_reads``: psycopg's BEGIN and COMMIT round trips are two of a read's
three (``bench/api/README.md``). A read that finds a contract past its term expires it, which
writes: the request then runs again from the start, in a transaction, and answers as before.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.postgresql.psycopg import PGDialect_psycopg

from app.db.session import NeedsTransaction, _plain_reads_only, autocommit_reads, get_engine
from app.settings import Settings
from tests.integration.api.conftest import Api


@contextmanager
def sent(settings: Settings) -> Iterator[list[tuple[str, bool]]]:
    """The statements the API's engines send meanwhile (the transactional one and, on
    PostgreSQL, the reads' own): (first two words, outside a transaction)."""
    engines = [get_engine(settings.database_url, settings.database_options())]
    reads = autocommit_reads(settings.database_url, settings.read_database_options())
    engines += [] if reads is None else [reads]
    seen: list[tuple[str, bool]] = []

    def note(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        # The requests' statements, not the background sweepers' on their own threads.
        if not threading.current_thread().name.startswith("AnyIO worker thread"):
            return
        dbapi = conn.connection.dbapi_connection
        words = " ".join(statement.split()[:2]).upper()
        seen.append((words, bool(getattr(dbapi, "autocommit", False))))

    for engine in engines:
        event.listen(engine, "before_cursor_execute", note)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", note)


def past_its_term(settings: Settings, contract_id: int) -> None:
    with get_engine(settings.database_url).begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE contracts SET starts_at = '2020-01-01', ends_at = '2020-06-01' "
                "WHERE id = :id"
            ),
            {"id": contract_id},
        )


def audit_actions(settings: Settings, contract_id: int) -> list[str]:
    with get_engine(settings.database_url).connect() as conn:
        return list(
            conn.scalars(
                sa.text(
                    "SELECT action FROM audit_log WHERE entity_type = 'contract' "
                    "AND entity_id = :id ORDER BY id"
                ),
                {"id": contract_id},
            )
        )


@pytest.mark.parametrize("statement", ["SELECT 1", "  select id from contracts where id = 1"])
def test_a_plain_read_may_be_sent_outside_a_transaction(statement: str) -> None:
    _plain_reads_only(None, None, statement, None, None, False)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE contracts SET version = 2",
        "INSERT INTO audit_log (id) VALUES (1)",
        "DELETE FROM offers",
        "WITH sealed AS (INSERT INTO audit_log (id) VALUES (1) RETURNING id) SELECT id FROM sealed",
        "SELECT contracts.id FROM contracts WHERE contracts.id = 1 FOR UPDATE",
        "SELECT id FROM contracts FOR NO KEY UPDATE",
        "SELECT id FROM contracts FOR SHARE",
        "SELECT id FROM contracts\nFOR KEY SHARE",
    ],
)
def test_anything_else_needs_a_transaction(statement: str) -> None:
    with pytest.raises(NeedsTransaction):
        _plain_reads_only(None, None, statement, None, None, False)


# PostgreSQL only: SQLite reads in transactions as before (the other tests here run on both).
@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_get_reads_outside_a_transaction_and_a_write_inside_one(
    abc: Api, settings: Settings, db_url: str
) -> None:
    contract = abc.propose("A", "B")
    path = f"/v1/contracts/{contract['id']}"
    with sent(settings) as reading:
        assert abc.get("B", path).json()["version"] == 1
        assert len(abc.get("A", "/v1/contracts").json()) == 1
    assert reading and all(outside for _, outside in reading), reading
    with sent(settings) as writing:
        countered = abc.post("B", f"{path}/counter", {"version": 1, "price_min": 0.9})
        assert countered.status_code == 200, countered.text
    assert writing and not any(outside for _, outside in writing), writing


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_reads_never_set_or_reset_the_isolation_level(
    abc: Api, settings: Settings, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reads' connections are put in autocommit once, when made, and stay so: borrowing
    the transactional pool's set AUTOCOMMIT at each checkout and reset it at each checkin,
    a quarter of what a read's round trips had cost (``bench/api/README.md``)."""
    contract = abc.propose("A", "B")
    path = f"/v1/contracts/{contract['id']}"
    assert abc.get("B", path).status_code == 200  # the reads' connection is made here
    changes: list[object] = []
    set_isolation_level = PGDialect_psycopg.set_isolation_level

    def counted(self: PGDialect_psycopg, dbapi_connection: Any, level: Any) -> None:
        changes.append(level)
        set_isolation_level(self, dbapi_connection, level)

    monkeypatch.setattr(PGDialect_psycopg, "set_isolation_level", counted)
    with sent(settings) as reading:
        for _ in range(3):
            assert abc.get("B", path).json()["version"] == 1
        assert [c["id"] for c in abc.get("A", "/v1/contracts").json()] == [contract["id"]]
    assert len(reading) >= 4 and all(outside for _, outside in reading), reading
    assert changes == []


def test_a_get_finding_a_contract_past_its_term_expires_it(
    abc: Api, settings: Settings, db_url: str
) -> None:
    contract = abc.propose("A", "B")
    past_its_term(settings, contract["id"])
    path = f"/v1/contracts/{contract['id']}"
    with sent(settings) as statements:
        read = abc.get("B", path)
    assert read.status_code == 200, read.text
    assert (read.json()["status"], read.json()["version"]) == ("expired", 2)
    assert read.json()["ended_at"].startswith("2020-06-01")
    # Once: the first run's expiry never reached the database.
    assert [s for s, _ in statements].count("UPDATE CONTRACTS") == 1
    assert audit_actions(settings, contract["id"]) == ["contract.proposed", "contract.expired"]
    history = abc.get("A", f"{path}/history").json()
    assert [e["action"] for e in history] == ["proposed", "expired"]
    if db_url.startswith("postgresql"):
        # Read outside a transaction first, then again, and written, inside one.
        assert statements[0][0].startswith("SELECT") and statements[0][1]
        assert ("UPDATE CONTRACTS", False) in statements
        assert not any(outside for s, outside in statements if not s.startswith("SELECT"))
    # The same read again: nothing left to write.
    again = abc.get("B", path)
    assert (again.json()["status"], again.json()["version"]) == ("expired", 2)
    assert again.headers["etag"] == read.headers["etag"]


def test_a_list_redone_in_a_transaction_answers_with_one_set_of_headers(
    abc: Api, settings: Settings
) -> None:
    api = abc
    api.register("D")
    ids = [api.propose("A", partner)["id"] for partner in "BCD"]
    for contract_id in ids[:2]:
        past_its_term(settings, contract_id)
    page = api.get("A", "/v1/contracts?limit=2")
    assert page.status_code == 200, page.text
    assert [(c["id"], c["status"]) for c in page.json()] == [
        (ids[0], "expired"),
        (ids[1], "expired"),
    ]
    links = page.headers.get_list("link")
    assert len(links) == 1 and 'rel="next"' in links[0], links
    rest = api.client.get(links[0].split(">")[0].lstrip("<"), headers=api.headers("A"))
    assert [(c["id"], c["status"]) for c in rest.json()] == [(ids[2], "proposed")]
    for contract_id in ids[:2]:
        assert audit_actions(settings, contract_id) == ["contract.proposed", "contract.expired"]


def test_a_contract_read_as_a_row_answers_as_the_object_did(abc: Api, settings: Settings) -> None:
    """The reads answer from rows of the contracts table (``repository.get_row``,
    ``page_rows``); the write that follows a read answers from the ORM object: both alike."""
    contract = abc.propose(
        "A",
        "B",
        ends_at="2031-01-01T00:00:00Z",
        availability={"recovery": "precise", "max_delay_seconds": 3, "replica_hosting": True},
    )
    path = f"/v1/contracts/{contract['id']}"
    countered = abc.post("B", f"{path}/counter", {"version": 1, "price_min": 0.9}).json()
    assert abc.get("A", path).json() == countered
    assert abc.get("admin", path).json() == countered
    assert abc.get("A", "/v1/contracts").json() == [countered]
    assert abc.get("B", "/v1/contracts?status=countered").json() == [countered]
    assert abc.get("B", "/v1/contracts?status=active").json() == []
    assert abc.get("C", path).status_code == 404
    assert abc.get("C", "/v1/contracts").json() == []
