"""What the admin pages show for a seeded federation, and their live regions."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

from tests.integration.admin.seeding import Federation


def rows(html: str, attribute: str) -> list[str]:
    return re.findall(rf'data-{attribute}="([^"]+)"', html)


def test_overview_lists_participants_with_load_threshold_and_verdict(admin: TestClient) -> None:
    page = admin.get("/admin/").text
    assert rows(page, "participant") == ["A", "B", "C", "D"]
    # A reported 92 against a threshold of 79.5 while others have room: not acceptable, and why.
    assert "Not an acceptable allocation" in page
    assert "A is over its threshold (92.0 &gt; 79.5)" in page
    assert "load 92.0 / threshold 79.5 / capacity 100.0" in page
    # C never reported: its load is what it hosts (4 tasks of 5 units), marked as such.
    c_row = page.split('data-participant="C"')[1].split("</tr>")[0]
    assert ">20.0<" in c_row and "no agent report yet" in c_row


def test_overview_becomes_acceptable_when_loads_drop(
    admin: TestClient, federation: Federation
) -> None:
    federation.heartbeat("A", 70.0, marginal_cost=0.2, threshold=79.5)
    page = admin.get("/admin/?partial=live").text
    assert "<html" not in page and 'id="verdict"' in page
    assert "Acceptable allocation" in page


def test_allocation_filters_by_participant_and_shows_contract_and_price(
    admin: TestClient, federation: Federation
) -> None:
    everyone = rows(admin.get("/admin/allocation").text, "task")
    assert len(everyone) == 37  # the demo's 36 loads and its source fragment A.conns
    b_page = admin.get("/admin/allocation?participant=B").text
    b_tasks = rows(b_page, "task")
    # B's own six tasks and A.q01, which it hosts after the seeded move.
    assert sorted(b_tasks) == ["A.q01", *[f"B.q0{i}" for i in range(1, 7)]]
    moved = b_page.split('data-task="A.q01"')[1].split("</tr>")[0]
    ab = federation.contract_between("A", "B")
    assert f'href="/admin/contracts/{ab["id"]}"' in moved and "0.250" in moved
    assert admin.get("/admin/allocation?participant=Nobody").status_code == 404


def test_task_page_shows_its_move_history(admin: TestClient, federation: Federation) -> None:
    federation.load_move("A.q01", "B", "C", price=0.26)
    page = admin.get("/admin/tasks/A.q01").text
    history = page.split("Move history")[1].split("Audit")[0]
    assert len(rows(history, "movement")) == 2
    assert re.search(r"A</a> → <a[^>]*>B</a>.*committed", history, re.S)
    assert "0.260" in history
    assert 'id="task-host"><a href="/admin/participants/C">C</a>' in page


def test_contracts_page_draws_the_graph_with_price_ranges(admin: TestClient) -> None:
    page = admin.get("/admin/contracts").text
    svg = page.split('<svg class="graph"')[1].split("</svg>")[0]
    assert svg.count('class="edge edge-active"') == 4
    assert svg.count('class="node"') == 4
    assert "0.24\u20130.26" in svg


def test_contract_page_shows_terms_history_and_ledger(
    admin: TestClient, federation: Federation
) -> None:
    ab = federation.contract_between("A", "B")
    # A's heartbeat accrues what it owes for the task B hosts.
    federation.heartbeat("A", 87.0)
    page = admin.get(f"/admin/contracts/{ab['id']}").text
    history = page.split("Negotiation history")[1].split("<h2>")[0]
    # Contracts from a file enter the registry active, recorded as "applied" by the file.
    assert "applied" in history and "file:test" in history
    ledger = page.split("<h2>Ledger</h2>")[1].split("<h2>")[0]
    assert "accrual" in ledger
    assert "A</a> → <a" in ledger


def test_movements_timeline_shows_reason_duration_and_price(admin: TestClient) -> None:
    page = admin.get("/admin/movements").text
    assert rows(page, "movement") == ["1"]
    assert "load · 1" in page
    assert page.count('class="mark mark-committed"') == 1
    row = page.split('data-movement="1"')[1].split("</tr>")[0]
    assert "0.250" in row and (" ms" in row or " s<" in row)


def test_participant_page_charts_load_and_cost_curve_with_prices(
    admin: TestClient, federation: Federation
) -> None:
    federation.heartbeat("A", 85.0, marginal_cost=1.5, threshold=79.5)
    page = admin.get("/admin/participants/A").text
    assert page.count('<svg class="chart"') == 3
    load_chart = page.split(">A: load over time</text>")[1].split("</svg>")[0]
    assert load_chart.count("<polyline") == 2  # load and threshold, two samples each
    curve = page.split(">A: marginal cost curve with contract prices</text>")[1].split("</svg>")[0]
    # A's contracts with B and C share one price range, so one band names both.
    assert curve.count('class="band"') == 1
    assert "#1 B, #2 C: 0.24\u20130.26" in curve
    assert "now 85.0" in curve
    assert rows(page, "task").count("A.q01") == 1  # owned, hosted by B
