"""The statements the API builds once must stay ones SQLAlchemy caches compiled: a statement
without a cache key (a multi-row VALUES, for one) is compiled anew on every execution, which
costs more than building it did (bench/api/README.md)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy.dialects import postgresql

from app.audit import sealing
from app.contracts import repository as contracts
from app.contracts import service as contract_service
from app.movements import payments
from app.offers import service as offers
from app.participants import repository as participants

STATEMENTS: dict[str, Any] = {
    "contract by id": contracts._BY_ID,
    "contract by id, locked": contracts._BY_ID_LOCKED,
    "contracts due to expire": contracts._DUE_OF_PARTY,
    "every contract due to expire": contracts._DUE_ANYONE,
    "live contract between two": contracts._LIVE_BETWEEN,
    "a contract's ledger": contracts._LEDGER,
    "a page of contracts": contracts._page(True, True, True, True),
    "a contract by id, as a row": contracts._ROW_BY_ID,
    "a page of contracts, as rows": contracts._page(True, True, True, True, rows=True),
    "a page of offers": offers._page(True, True, True, True),
    "a contract's open offers": contract_service._OPEN_OFFERS,
    "tasks moved under a contract": payments._MOVED_UNDER,
    "participant by key": participants._BY_KEY_HASH,
    "participant by name": participants._BY_NAME,
    "names by id": participants._NAMES_BY_ID,
    "audit head": sealing._TOUCH[True, False],
    "audit entries at once": sealing._write_at_once(2, 3),
    "audit entries with a contract event": sealing._write_at_once(
        1, 2, ((contract_service._EVENTS, ("contract_id", "version", "at")),)
    ),
}


@pytest.mark.parametrize("name", list(STATEMENTS))
def test_a_statement_built_once_is_cached_compiled(name: str) -> None:
    statement = STATEMENTS[name]
    assert statement._generate_cache_key() is not None
    assert statement.compile(dialect=postgresql.psycopg.dialect()).string


def test_the_audit_write_holds_every_row_and_the_new_end() -> None:
    sql = str(sealing._write_at_once(2, 3).compile(dialect=postgresql.psycopg.dialect()))
    assert sql.count("INSERT INTO audit_log") == 2
    assert sql.count("INSERT INTO audit_subjects") == 3
    assert "UPDATE audit_head" in sql
