"""Admin actions through the UI: confirmed, carried out by the services, audited, visible."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.session import unit_of_work
from app.models import AuditEntry, Contract, ContractStatus, Participant, Task
from tests.integration.admin.conftest import csrf_of
from tests.integration.admin.seeding import Federation
from tests.support.snapshot import registry_snapshot


def confirm(client: TestClient, url: str) -> Any:
    page = client.get(url)
    assert page.status_code == 200, page.text
    assert "recorded in the audit log" in page.text
    data = {"csrf_token": csrf_of(page.text)}
    if 'name="version"' in page.text:
        data["version"] = page.text.split('name="version" value="')[1].split('"')[0]
    return client.post(url, data=data, follow_redirects=False)


def audit_actions(db_url: str, entity_type: str, entity_id: int) -> list[tuple[str, str]]:
    with unit_of_work(db_url) as session:
        return [
            (e.actor, e.action)
            for e in session.scalars(
                select(AuditEntry)
                .where(AuditEntry.entity_type == entity_type, AuditEntry.entity_id == entity_id)
                .order_by(AuditEntry.id)
            )
        ]


def test_suspend_and_reinstate_a_participant(
    admin: TestClient, federation: Federation, db_url: str
) -> None:
    response = confirm(admin, "/admin/participants/C/suspend")
    assert response.status_code == 303
    assert response.headers["location"] == "/admin/participants/C"
    with unit_of_work(db_url) as session:
        c = session.scalars(select(Participant).where(Participant.name == "C")).one()
        assert c.status.value == "suspended"
        c_id = c.id
    assert ("admin", "participant.suspended") in audit_actions(db_url, "participant", c_id)
    # The suspension is real: C's key no longer opens the API.
    refused = federation.client.get("/v1/participants/me", headers=federation.headers("C"))
    assert refused.status_code == 403

    page = admin.get("/admin/participants/C").text
    assert "participant C is now suspended" in page
    assert "participant.suspended" in page
    assert "participant.suspended" in admin.get("/admin/audit").text

    assert confirm(admin, "/admin/participants/C/reinstate").status_code == 303
    assert ("admin", "participant.reinstated") in audit_actions(db_url, "participant", c_id)
    ok = federation.client.get("/v1/participants/me", headers=federation.headers("C"))
    assert ok.status_code == 200


def test_terminate_a_contract_settles_it_through_the_lifecycle(
    admin: TestClient, federation: Federation, db_url: str
) -> None:
    ab = federation.contract_between("A", "B")
    response = confirm(admin, f"/admin/contracts/{ab['id']}/terminate")
    assert response.status_code == 303
    with unit_of_work(db_url) as session:
        contract = session.get(Contract, ab["id"])
        assert contract is not None
        assert contract.status is ContractStatus.terminated
        assert contract.version == ab["version"] + 1
        assert contract.settled_amount is not None
    assert ("admin", "contract.terminated") in audit_actions(db_url, "contract", ab["id"])
    page = admin.get(f"/admin/contracts/{ab['id']}").text
    assert "terminated" in page and "Terminate…" not in page

    # Terminating again is an illegal transition: 409, and nothing changes.
    before = registry_snapshot(db_url)
    token = csrf_of(page)
    again = admin.post(
        f"/admin/contracts/{ab['id']}/terminate",
        data={"csrf_token": token, "version": str(ab["version"] + 1)},
    )
    assert again.status_code == 409
    assert registry_snapshot(db_url) == before


def test_terminate_with_a_stale_version_is_refused(
    admin: TestClient, federation: Federation, db_url: str
) -> None:
    bc = federation.contract_between("B", "C")
    token = csrf_of(admin.get(f"/admin/contracts/{bc['id']}/terminate").text)
    before = registry_snapshot(db_url)
    response = admin.post(
        f"/admin/contracts/{bc['id']}/terminate",
        data={"csrf_token": token, "version": str(bc["version"] - 1)},
    )
    assert response.status_code == 409
    assert registry_snapshot(db_url) == before


def test_pin_a_task_keeps_the_market_off_it(
    admin: TestClient, federation: Federation, db_url: str
) -> None:
    assert confirm(admin, "/admin/tasks/A.q02/pin").status_code == 303
    with unit_of_work(db_url) as session:
        task = session.scalars(select(Task).where(Task.name == "A.q02")).one()
        assert task.pinned
        task_id = task.id
    assert ("admin", "task.pinned") in audit_actions(db_url, "task", task_id)
    ab = federation.contract_between("A", "B")
    offer = federation.client.post(
        "/v1/offers",
        json={"contract_id": ab["id"], "tasks": ["A.q02"], "price": 0.25},
        headers=federation.headers("A"),
    )
    assert offer.status_code == 409
    assert "pinned" in offer.json()["detail"]
    page = admin.get("/admin/tasks/A.q02").text
    assert "task.pinned" in page and "Unpin" in page

    assert confirm(admin, "/admin/tasks/A.q02/unpin").status_code == 303
    assert ("admin", "task.unpinned") in audit_actions(db_url, "task", task_id)


def test_an_unknown_verb_is_a_clear_error(admin: TestClient, db_url: str) -> None:
    before = registry_snapshot(db_url)
    page = admin.get("/admin/tasks/A.q02/delete")
    assert page.status_code == 422
    assert "unknown action" in page.text and "pin or unpin" in page.text
    assert registry_snapshot(db_url) == before
