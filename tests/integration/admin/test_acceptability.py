"""The admin overview judges with the one acceptability rule: on the same standings it gives the
simulator's verdict and reasons, and says what blocks the load (the contract graph)."""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.admin import readmodels
from app.db.session import unit_of_work
from app.federation.apply import apply_federation
from app.federation.document import FederationDoc, load_federation
from app.market.simulator import _Federation
from app.settings import Settings
from tests.integration.admin.conftest import sign_in

DEMO = Path(__file__).resolve().parents[3] / "contracts" / "borealis-demo.yaml"


def _demo(*, contracts: bool) -> FederationDoc:
    """The demo with every participant online from the start (the registry has no joins_at),
    with or without its contracts."""
    doc = load_federation(DEMO)
    people = tuple(dataclasses.replace(p, joins_at=None) for p in doc.participants)
    return dataclasses.replace(
        doc, participants=people, contracts=doc.contracts if contracts else ()
    )


@pytest.mark.parametrize("contracts", [False, True], ids=["no-contracts", "demo-contracts"])
def test_admin_overview_and_simulator_agree_on_the_same_standings(
    settings: Settings, contracts: bool
) -> None:
    doc = _demo(contracts=contracts)
    with unit_of_work(settings.database_url) as session:
        apply_federation(session, doc, actor="file:test")
    with unit_of_work(settings.database_url) as session:
        admin = readmodels.overview(session, settings).verdict
    simulated = _Federation(doc, None).judge(explain=True)  # before any offer round
    assert (admin.acceptable, admin.overloaded, admin.offenders) == (
        simulated.acceptable,
        simulated.overloaded,
        simulated.offenders,
    )
    assert admin.reasons == simulated.reasons
    assert not admin.acceptable and admin.offenders == ("A",)
    if contracts:
        assert admin.reasons == (
            "A is over its threshold (130.0 > 80.0) while B, C, D have room and a contract "
            "path at a price both sides accept: the market has not moved the load yet",
        )
    else:
        assert admin.reasons == (
            "A is over its threshold (130.0 > 100.0) and no contract path leads from A to "
            "spare capacity (B, C, D)",
        )


def test_overview_page_explains_a_blocked_overload(
    settings: Settings, app_client: TestClient
) -> None:
    with unit_of_work(settings.database_url) as session:
        apply_federation(session, _demo(contracts=False), actor="file:test")
    page = sign_in(TestClient(app_client.app)).get("/admin/").text
    assert "Not an acceptable allocation" in page
    assert (
        "A is over its threshold (130.0 > 100.0) and no contract path leads from A to spare "
        "capacity (B, C, D)"
    ) in html.unescape(page)
