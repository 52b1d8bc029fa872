"""Pagination of the list endpoints, the client that follows it, the contract list's query
count, and ETags on one contract or task (issue 15, throughput). SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import event

from app.db.session import get_engine
from app.participant.client import FedloadClient
from app.settings import Settings
from tests.integration.api.conftest import Api


def walk(api: Api, who: str, path: str) -> list[list[dict[str, Any]]]:
    """Every page of a list, following ``Link: rel="next"`` until there is none."""
    pages = []
    url: str | None = path
    while url is not None:
        response = api.get(who, url)
        assert response.status_code == 200, response.text
        pages.append(response.json())
        url = response.links.get("next", {}).get("url")
        assert len(pages) < 50, "the walk does not end"
    return pages


def test_a_long_task_list_is_walked_once_in_order_even_while_it_grows(abc: Api) -> None:
    for i in range(23):
        r = abc.post("A", "/v1/tasks", {"name": f"A.t{i:02d}", "load": 1.0})
        assert r.status_code == 201, r.text
    first = abc.get("A", "/v1/tasks?limit=5")
    assert [t["name"] for t in first.json()] == ["A.t00", "A.t01", "A.t02", "A.t03", "A.t04"]
    # A task named before the cursor appears after the walk began: not seen, nothing repeats.
    assert abc.post("A", "/v1/tasks", {"name": "A.t00a", "load": 1.0}).status_code == 201
    pages = [first.json(), *walk(abc, "A", first.links["next"]["url"])]
    names = [t["name"] for page in pages for t in page]
    assert names == [f"A.t{i:02d}" for i in range(23)]
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    # Another participant's walk sees none of them (the filter survives the cursor).
    assert walk(abc, "B", "/v1/tasks?limit=5") == [[]]


def test_every_list_pages_with_limit_and_a_next_link(abc: Api) -> None:
    for name in "DEFGHIJ":
        abc.register(name)
    for partner in "BCDEFG":
        abc.propose("A", partner)
    for path, who, count in [
        ("/v1/participants", "A", 10),
        ("/v1/contracts", "A", 6),
        ("/v1/contracts?status=proposed", "admin", 6),
    ]:
        pages = walk(abc, who, f"{path}{'&' if '?' in path else '?'}limit=4")
        items = [item.get("id", item.get("name")) for page in pages for item in page]
        assert len(items) == count == len(set(items)), (path, items)
        assert all(len(page) <= 4 for page in pages)
    # A contract's history pages too: propose, counter, counter, oldest first.
    cid = abc.get("A", "/v1/contracts?limit=1").json()[0]["id"]
    for who, version in (("B", 1), ("A", 2)):
        counter = {"version": version, "price_min": 0.9, "price_max": 1.0 + version / 10}
        assert abc.post(who, f"/v1/contracts/{cid}/counter", counter).status_code == 200
    pages = walk(abc, "B", f"/v1/contracts/{cid}/history?limit=2")
    assert [[e["version"] for e in page] for page in pages] == [[1, 2], [3]]
    # Every list endpoint takes the parameters and answers a page (no Link: it fits).
    for path in ("/v1/offers", "/v1/movements", "/v1/replicas", "/v1/tasks"):
        response = abc.get("A", f"{path}?limit=1")
        assert response.status_code == 200 and "link" not in response.headers, path
    response = abc.get("admin", "/v1/permits?limit=1")
    assert response.status_code == 200


BAD_PAGES = [
    ("limit=0", "query.limit"),
    ("limit=501", "query.limit"),
    ("cursor=not-a-cursor", "query.cursor"),
    # A cursor of another list, and a forged one whose key has the wrong type.
    ("cursor=eyJsaXN0IjoidGFza3MiLCJhZnRlciI6WyJ0MDEiLDJdfQ", "query.cursor"),
    ("cursor=eyJsaXN0IjoiY29udHJhY3RzIiwiYWZ0ZXIiOlsieCJdfQ", "query.cursor"),
]


def test_a_bad_limit_or_cursor_is_a_422_naming_it(abc: Api) -> None:
    for query, field in BAD_PAGES:
        response = abc.get("A", f"/v1/contracts?{query}")
        assert response.status_code == 422, (query, response.text)
        assert response.json()["field"] == field, query


def test_the_client_reads_whole_lists_across_pages(
    abc: Api, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("app.participant.client.PAGE_SIZE", 2)
    for i in range(5):
        assert abc.post("A", "/v1/tasks", {"name": f"A.c{i}", "load": 1.0}).status_code == 201
    client = FedloadClient("http://testserver", abc.keys["A"], transport=abc.client._transport)
    try:
        assert [t["name"] for t in client.tasks()] == [f"A.c{i}" for i in range(5)]
        assert {p["name"] for p in client.participants()} == {"A", "B", "C"}
    finally:
        client.close()


def test_the_contract_list_costs_the_same_queries_for_3_or_9_contracts(
    api: Api, settings: Settings
) -> None:
    """No query per contract (the N+1 of issue 15): the parties' names come in one query."""
    for name in "ABCDEFGHIJ":
        api.register(name)
    engine = get_engine(settings.database_url, settings.database_options())
    statements: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    def one_list() -> int:
        statements.clear()
        event.listen(engine, "before_cursor_execute", count)
        try:
            response = api.get("A", "/v1/contracts")
        finally:
            event.remove(engine, "before_cursor_execute", count)
        assert response.status_code == 200
        return len(statements)

    def queries_for_list() -> int:
        # The caller's key is looked up again whenever the worker's 1 s key cache has expired
        # (a loaded machine can take that long between two calls): not a query per contract,
        # so the fewest of three calls in a row counts.
        return min(one_list() for _ in range(3))

    for partner in "BCD":
        api.propose("A", partner)
    with_three = queries_for_list()
    for partner in "EFGHIJ":
        api.propose("A", partner)
    assert len(api.get("A", "/v1/contracts").json()) == 9
    assert queries_for_list() == with_three


def get_if_none_match(api: Api, who: str, path: str, tag: str) -> Any:
    return api.client.get(path, headers={**api.headers(who), "If-None-Match": tag})


def test_etag_round_trip_on_a_contract_and_a_task(abc: Api) -> None:
    contract = abc.propose("A", "B")
    path = f"/v1/contracts/{contract['id']}"
    first = abc.get("A", path)
    tag = first.headers["etag"]
    unchanged = get_if_none_match(abc, "A", path, tag)
    assert unchanged.status_code == 304 and unchanged.content == b""
    assert unchanged.headers["etag"] == tag
    # B counters: the representation changes, and so do the tag and the answer.
    r = abc.post("B", f"{path}/counter", {"version": 1, "price_min": 0.9, "price_max": 1.1})
    assert r.status_code == 200, r.text
    changed = get_if_none_match(abc, "A", path, tag)
    assert changed.status_code == 200 and changed.json()["version"] == 2
    assert changed.headers["etag"] != tag

    assert abc.post("A", "/v1/tasks", {"name": "A.q", "load": 2.0}).status_code == 201
    task = abc.get("A", "/v1/tasks/A.q")
    weak = f'W/{task.headers["etag"]}, "other"'
    assert get_if_none_match(abc, "A", "/v1/tasks/A.q", weak).status_code == 304
    assert (
        abc.client.patch("/v1/tasks/A.q", json={"load": 3.0}, headers=abc.headers("A")).status_code
        == 200
    )
    again = get_if_none_match(abc, "A", "/v1/tasks/A.q", task.headers["etag"])
    assert again.status_code == 200 and again.json()["load"] == 3.0
