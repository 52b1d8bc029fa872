"""Participants' own work through the API, on SQLite and PostgreSQL: sources with declared
schemas, SQL checked against its inputs, Python fragments offered only where they may run,
and the owner's agent's analysis report."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select

from app.db.session import unit_of_work
from app.models import AuditEntry
from app.participant.client import FedloadClient
from tests.integration.api.conftest import Api
from tests.integration.api.test_market import active_contract
from tests.support.snapshot import registry_snapshot

READINGS = {
    "name": "A.readings",
    "source": {
        "kind": "files",
        "format": "json",
        "path": "/data/readings",
        "schema": "station STRING, ts TIMESTAMP, temp DOUBLE",
        "event_time": "ts",
    },
}
DAILY = {
    "name": "A.daily",
    "inputs": [{"task": "A.readings"}],
    "sql": "SELECT window(ts, '1 day') AS day, station, avg(temp) AS mean_temp FROM readings "
    "GROUP BY window(ts, '1 day'), station",
    "watermark": "1 hour",
    "sink": {"kind": "parquet", "path": "/results/daily"},
}
HOT = {
    "name": "A.hot",
    "inputs": [{"task": "A.readings"}],
    "python": "netmon.fragments:hot",
    "distribution": "netmon-fragments==1.2",
    "schema": "station STRING, hot BOOLEAN",
}


def declare(api: Api, who: str, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post(who, "/v1/tasks", body)
    assert r.status_code == 201, r.text
    return dict(r.json())


def put_analysis(api: Api, who: str, name: str, body: Any) -> Any:
    return api.client.put(f"/v1/tasks/{name}/analysis", json=body, headers=api.headers(who))


def test_a_source_and_a_sql_fragment_are_recorded_with_their_schemas(abc: Api) -> None:
    readings = declare(abc, "A", READINGS)
    assert (readings["synthetic"], readings["load"], readings["fragment"]) == (False, 0.0, None)
    assert readings["output_schema"] == "station string, ts timestamp, temp double, stime timestamp"
    assert readings["work"]["source"]["event_time"] == "ts"
    daily = declare(abc, "A", DAILY)
    assert daily["output_schema"] == (
        "day struct<start:timestamp,end:timestamp>, station string, mean_temp double, "
        "stime timestamp"
    )
    assert daily["work"]["watermark"] == "1 hour"
    assert daily["work"]["sink"] == {"kind": "parquet", "path": "/results/daily"}
    assert daily["analysis_error"] is None
    # A reader learns each input's columns and event time.
    assert daily["inputs"] == [
        {
            "task": "A.readings",
            "fragment": None,
            "schema": "station string, ts timestamp, temp double, stime timestamp",
            "event_time": "ts",
            "served_by": "A",
            "active_copies": [],
        }
    ]
    # A fragment over a fragment is read on stime, the federation's own event time.
    weekly = declare(
        abc,
        "A",
        {
            "name": "A.peak",
            "inputs": [{"task": "A.daily"}],
            "sql": "SELECT station, max(mean_temp) AS peak FROM daily GROUP BY station",
        },
    )
    assert weekly["inputs"][0]["event_time"] == "stime"
    assert weekly["output_schema"] == "station string, peak double, stime timestamp"


def test_a_task_with_no_work_is_synthetic_and_needs_a_load(abc: Api) -> None:
    plain = declare(abc, "A", {"name": "A.q1", "load": 4.0})
    assert (plain["synthetic"], plain["load"], plain["work"]) == (True, 4.0, {})
    r = abc.post("A", "/v1/tasks", {"name": "A.q2"})
    assert r.status_code == 422
    assert (r.json()["field"], r.json()["detail"]) == (
        "load",
        "a synthetic task declares its load (load: <load units>); a real one is measured",
    )
    # A catalogue fragment is real, with its kind's stream schema.
    conns = declare(abc, "A", {"name": "A.conns", "fragment": "generator"})
    assert (conns["synthetic"], conns["output_schema"]) == (
        False,
        "src_ip STRING, dst_ip STRING, dst_port INT, stime TIMESTAMP",
    )


BAD = [
    (
        "sql that does not parse",
        {**DAILY, "sql": "SELECT (window(ts, '1 day') FROM readings"},
        "sql",
        "the query does not parse as Spark SQL",
    ),
    (
        "unknown column",
        {**DAILY, "sql": "SELECT station, avg(tmp) AS t FROM readings GROUP BY station"},
        "sql",
        "unknown column 'tmp' in readings (it has station, ts, temp)",
    ),
    (
        "input whose schema does not fit",
        {**DAILY, "inputs": [{"task": "A.readings"}, {"task": "A.ints"}]},
        "inputs[1].task",
        "inputs A.readings and A.ints are merged into one stream, so their schemas must match: "
        "column 'temp' is double in A.readings, int in A.ints",
    ),
    (
        "unknown distribution",
        {**HOT, "distribution": "netmon-fragments"},
        "distribution",
        "unknown distribution 'netmon-fragments': it is not installed here",
    ),
    (
        "a synthetic input",
        {**DAILY, "inputs": [{"task": "A.plain"}]},
        "inputs[0].task",
        "task 'A.plain' is synthetic",
    ),
    ("a DML statement", {**DAILY, "sql": "DELETE FROM readings"}, "sql", "not DELETE"),
]


@pytest.mark.parametrize(("case", "body", "field", "words"), BAD, ids=[c[0] for c in BAD])
def test_bad_work_is_one_422_naming_the_field_and_writes_nothing(
    abc: Api, db_url: str, case: str, body: dict[str, Any], field: str, words: str
) -> None:
    declare(abc, "A", READINGS)
    ints = {**READINGS, "name": "A.ints"}
    ints["source"] = {**READINGS["source"], "schema": "station STRING, ts TIMESTAMP, temp INT"}
    declare(abc, "A", ints)
    declare(abc, "A", {"name": "A.plain", "load": 1.0})
    before = registry_snapshot(db_url)
    r = abc.post("A", "/v1/tasks", {**body, "name": "A.new"})
    assert r.status_code == 422, r.text
    assert r.json()["field"] == field
    assert words in r.json()["detail"]
    assert "\n" not in r.json()["detail"]
    assert registry_snapshot(db_url) == before


def test_the_owners_agent_reports_its_analysis(abc: Api, db_url: str) -> None:
    declare(abc, "A", READINGS)
    declare(abc, "A", {**DAILY, "sql": "SELECT station, count(*) FROM readings GROUP BY station"})
    assert abc.get("A", "/v1/tasks/A.daily").json()["output_schema"] is None
    # The agent's client, over the app's own transport.
    client = FedloadClient(
        base_url="http://testserver", api_key=abc.keys["A"], transport=abc.client._transport
    )
    reported = client.report_analysis(
        "A.daily", error=None, output_schema="station STRING, `count(1)` BIGINT, stime TIMESTAMP"
    )
    assert reported["output_schema"] == "station string, `count(1)` bigint, stime timestamp"
    failed = put_analysis(abc, "A", "A.daily", {"error": "[UNRESOLVED_COLUMN] tmp"})
    assert failed.status_code == 200, failed.text
    # An error alone keeps the schema; null clears the error.
    assert (failed.json()["analysis_error"], failed.json()["output_schema"]) == (
        "[UNRESOLVED_COLUMN] tmp",
        "station string, `count(1)` bigint, stime timestamp",
    )
    cleared = put_analysis(abc, "A", "A.daily", {"error": None, "output_schema": None})
    assert cleared.json()["analysis_error"] is None
    with unit_of_work(db_url) as session:
        details = list(
            session.scalars(
                select(AuditEntry.detail)
                .where(AuditEntry.action == "task.analysed")
                .order_by(AuditEntry.id)
            )
        )
    assert details == [
        {"name": "A.daily", "output_schema": "station string, `count(1)` bigint, stime timestamp"},
        {"name": "A.daily", "analysis_error": "[UNRESOLVED_COLUMN] tmp"},
        {"name": "A.daily", "analysis_error": None},
    ]


def test_only_the_owner_reports_and_a_bad_schema_is_refused(abc: Api, db_url: str) -> None:
    declare(abc, "A", READINGS)
    before = registry_snapshot(db_url)
    bad = put_analysis(abc, "A", "A.readings", {"output_schema": "station STRUNG"})
    assert (bad.status_code, bad.json()["field"]) == (422, "output_schema")
    assert "unknown type 'STRUNG'" in bad.json()["detail"]
    stranger = put_analysis(abc, "B", "A.readings", {"error": "no"})
    assert stranger.status_code == 404
    admin = put_analysis(abc, "admin", "A.readings", {"error": "no"})
    assert admin.status_code == 403
    assert registry_snapshot(db_url) == before


def _heartbeat(api: Api, who: str, fragments: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {} if fragments is None else {"fragments": fragments}
    r = api.post(who, "/v1/participants/me/heartbeat", body)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_python_fragment_is_offered_only_to_a_partner_that_runs_it(abc: Api, db_url: str) -> None:
    ab = active_contract(abc, "A", "B")
    declare(abc, "A", READINGS)
    declare(abc, "A", HOT)
    declare(abc, "A", DAILY)
    ac = active_contract(abc, "A", "C")
    # SQL is data any partner runs: C advertised nothing and is offered it.
    sql_only = abc.post(
        "A", "/v1/offers", {"contract_id": ac["id"], "tasks": ["A.daily"], "price": 0.22}
    )
    assert sql_only.status_code == 201, sql_only.text
    withdrawn = abc.post("A", f"/v1/offers/{sql_only.json()['id']}/withdraw", {"version": 1})
    assert withdrawn.status_code == 200, withdrawn.text
    offer = {"contract_id": ab["id"], "tasks": ["A.daily", "A.hot"], "price": 0.22}
    before = registry_snapshot(db_url)
    refused = abc.post("A", "/v1/offers", offer)
    assert refused.status_code == 422, refused.text
    assert (refused.json()["field"], refused.json()["detail"]) == (
        "tasks[1]",
        "B does not run Python fragments from netmon-fragments (its agent advertises: none); "
        "task A.hot cannot be offered to it",
    )
    assert registry_snapshot(db_url) == before
    # B's agent advertises it (spelt its own way); a later heartbeat without the field keeps it.
    assert _heartbeat(abc, "B", ["Netmon_Fragments", "other"])["fragments"] == [
        "Netmon_Fragments",
        "other",
    ]
    assert _heartbeat(abc, "B", None)["fragments"] == ["Netmon_Fragments", "other"]
    made = abc.post("A", "/v1/offers", offer)
    assert made.status_code == 201, made.text


def test_a_bad_fragments_list_in_a_heartbeat_is_refused(abc: Api) -> None:
    r = abc.post("B", "/v1/participants/me/heartbeat", {"fragments": ["no spaces"]})
    assert (r.status_code, r.json()["field"]) == (422, "fragments.0")
