"""The statements each request of the benchmark's negotiation sends (``bench/api/run.py``).

Every statement is a round trip and costs the service CPU on both sides of it (SQLAlchemy,
psycopg, a PostgreSQL backend), more than most of what a request computes
(``bench/api/README.md``, session 25). Pinned per request, so that a change adding one shows
here. Counted at the cursor: psycopg's BEGIN and COMMIT are not among them.
"""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from app.auth.principal import Principal
from app.contracts import service
from app.db.session import get_engine
from app.models import Participant
from app.settings import Settings
from tests.integration.api.conftest import Api
from tests.integration.api.test_reads_outside_transactions import (
    audit_actions,
    past_its_term,
    sent,
)

# (who, method, path, body, statements on PostgreSQL); "{id}" is the proposed contract's.
CYCLE: list[tuple[str, str, str, Any, int]] = [
    # The partner and the live contract between the two in one lookup; the contract; the
    # audit chain's head; the audit entry with the contract's history event.
    ("A", "POST", "/v1/contracts", {"partner": "B", "price_min": 0.8, "price_max": 1.0}, 4),
    ("B", "GET", "/v1/contracts/{id}", None, 1),
    # The page says itself whether a contract of the caller is due to expire.
    ("A", "GET", "/v1/contracts?limit=20", None, 1),
    # The contract, locked; its update; the head; the entry with the event.
    ("B", "POST", "/v1/contracts/{id}/counter", {"version": 1, "price_min": 0.9}, 4),
    ("A", "GET", "/v1/contracts/{id}", None, 1),
    ("B", "GET", "/v1/offers?limit=20", None, 1),
    ("A", "POST", "/v1/contracts/{id}/accept", {"version": 2}, 4),
    ("B", "GET", "/v1/contracts/{id}", None, 1),
    ("B", "GET", "/v1/contracts?limit=20&status=active", None, 1),
    ("A", "GET", "/v1/offers?limit=20", None, 1),
    # As counter and accept, and the four reads the settlement needs: tasks moved under the
    # contract, replicas, the ledger, the open offers to withdraw.
    ("A", "POST", "/v1/contracts/{id}/terminate", {"version": 3}, 8),
    ("A", "GET", "/v1/contracts/{id}", None, 1),
]


def _cycle(api: Api, settings: Settings) -> list[int]:
    counts = []
    contract_id = None
    for who, method, path, body, _ in CYCLE:
        with sent(settings) as statements:
            if method == "POST":
                reply = api.post(who, path.format(id=contract_id), body)
            else:
                reply = api.get(who, path.format(id=contract_id))
        assert reply.status_code in (200, 201), (path, reply.text)
        contract_id = contract_id or reply.json()["id"]
        counts.append(len(statements))
    return counts


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_each_request_of_a_negotiation_sends_its_few_statements(
    abc: Api, settings: Settings, db_url: str
) -> None:
    _cycle(abc, settings)  # each key is looked up once, then remembered (app/auth/key_cache.py)
    assert _cycle(abc, settings) == [expected for *_, expected in CYCLE]


def test_a_list_asks_for_no_expiry_of_its_own(abc: Api, settings: Settings) -> None:
    """SQLite too: the page query says whether anything is due."""
    abc.propose("A", "B")
    abc.get("A", "/v1/contracts")  # the key's lookup
    with sent(settings) as statements:
        assert len(abc.get("A", "/v1/contracts").json()) == 1
    assert [s for s, _ in statements] == ["SELECT CONTRACTS.ID,"]


def test_a_list_expires_what_is_due_beyond_its_page(abc: Api, settings: Settings) -> None:
    """The due contract is not on the page asked for (the first of two), and no page at all
    matches the filter before it is expired: each list expires it first all the same."""
    first = abc.propose("A", "B")["id"]
    due = abc.propose("A", "C")["id"]
    past_its_term(settings, due)
    page = abc.get("A", "/v1/contracts?limit=1")
    assert [(c["id"], c["status"]) for c in page.json()] == [(first, "proposed")]
    assert audit_actions(settings, due) == ["contract.proposed", "contract.expired"]
    expired = abc.get("C", "/v1/contracts?status=expired").json()
    assert [(c["id"], c["version"]) for c in expired] == [(due, 2)]
    other = abc.propose("B", "C")["id"]
    past_its_term(settings, other)
    # An empty page (B has nothing expired yet) still expires B's contract, and shows it.
    expired = abc.get("B", "/v1/contracts?status=expired").json()
    assert [(c["id"], c["status"]) for c in expired] == [(other, "expired")]
    assert audit_actions(settings, other) == ["contract.proposed", "contract.expired"]


def test_a_proposal_names_the_live_contract_it_would_duplicate(abc: Api) -> None:
    live = abc.propose("A", "B")["id"]
    for who, partner in (("A", "B"), ("B", "A")):
        refused = abc.post(
            who, "/v1/contracts", {"partner": partner, "price_min": 0.8, "price_max": 1.0}
        )
        assert refused.status_code == 409, refused.text
        assert refused.json()["field"] == "partner"
        assert f"already have contract {live} (proposed)" in refused.json()["detail"]
    abc.post("B", f"/v1/contracts/{live}/reject", {"version": 1})
    assert abc.propose("B", "A")["version"] == 1  # an ended contract is no obstacle


def test_a_history_read_in_the_transaction_of_its_step_shows_the_step(
    abc: Api, settings: Settings
) -> None:
    """The history event of a step is written with the commit (``sealing.insert_at_commit``),
    or before, when the transaction reads the history itself."""
    contract = abc.propose("A", "B")
    with Session(get_engine(settings.database_url)) as session:
        b_id = session.scalar(sa.select(Participant.id).where(Participant.name == "B"))
        assert b_id is not None
        b = Principal(participant_id=b_id, name="B")
        service.reject(session, b, contract["id"], 1)
        steps = service.history(session, b, contract["id"])
        assert [s.action for s in steps] == ["proposed", "rejected"]
        session.commit()
    history = abc.get("A", f"/v1/contracts/{contract['id']}/history").json()
    assert [e["action"] for e in history] == ["proposed", "rejected"]


def test_a_decision_on_a_contract_past_its_term_is_refused_as_before(
    abc: Api, settings: Settings
) -> None:
    """The decision reads the contract as a row; one past its term still goes through the ORM's
    expiry, and the step answers 409, its transaction (the expiry with it) rolled back."""
    contract = abc.propose("A", "B")
    past_its_term(settings, contract["id"])
    path = f"/v1/contracts/{contract['id']}"
    for who, step, body in (("B", "accept", {"version": 1}), ("B", "counter", {"version": 1})):
        refused = abc.post(who, f"{path}/{step}", body)
        assert refused.status_code == 409, refused.text
        assert refused.json() == {
            "detail": "the contract expired at 2020-06-01T00:00:00+00:00",
            "field": "status",
        }
    assert audit_actions(settings, contract["id"]) == ["contract.proposed"]
    read = abc.get("A", path).json()
    assert (read["status"], read["version"]) == ("expired", 2)
    assert audit_actions(settings, contract["id"]) == ["contract.proposed", "contract.expired"]
