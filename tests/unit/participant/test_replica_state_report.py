"""A holder's DPC state report is a blind write: a 409 for a concurrent change (the owner's
balance, touched by the other holder's report at the same moment) is sent again; any other
error is the caller's at once.

The client against an httpx transport that answers as the service does (the service itself
answers 409 with field "version" on an optimistic-lock loss, ``app/main.py``)."""

from __future__ import annotations

import json

import httpx
import pytest

from app.participant.client import STALE_RETRIES, ApiError, FedloadClient

STALE = {"detail": "the record changed concurrently; re-read it and retry", "field": "version"}
REPLICA = {"task": "O.x", "participant": "T", "state": "UP_FAILURE"}


def _client(answers: list[tuple[int, dict[str, object]]], seen: list[dict[str, object]]):
    def answer(request: httpx.Request) -> httpx.Response:
        assert (request.method, request.url.path) == ("PUT", "/v1/replicas/O.x/state")
        seen.append(json.loads(request.content))
        status, body = answers[min(len(seen), len(answers)) - 1]
        return httpx.Response(status, json=body)

    return FedloadClient("http://registry", "key", transport=httpx.MockTransport(answer))


def test_a_lost_race_is_reported_again_until_it_lands() -> None:
    seen: list[dict[str, object]] = []
    client = _client([(409, STALE), (409, STALE), (200, REPLICA)], seen)
    assert client.report_replica_state("O.x", "UP_FAILURE") == REPLICA
    assert seen == [{"state": "UP_FAILURE"}] * 3


def test_a_race_lost_every_time_ends_with_the_error() -> None:
    seen: list[dict[str, object]] = []
    client = _client([(409, STALE)], seen)
    with pytest.raises(ApiError, match="changed concurrently") as raised:
        client.report_replica_state("O.x", "STABLE")
    assert (raised.value.status, len(seen)) == (409, STALE_RETRIES)


@pytest.mark.parametrize(
    "status, body",
    [
        (409, {"detail": "stale replica epoch 1", "field": "epoch"}),
        (404, {"detail": "no task 'O.x'", "field": "task"}),
        (422, {"detail": "state must be one of ...", "field": "state"}),
    ],
)
def test_other_errors_are_not_retried(status, body) -> None:
    seen: list[dict[str, object]] = []
    client = _client([(status, body)], seen)
    with pytest.raises(ApiError) as raised:
        client.report_replica_state("O.x", "STABLE")
    assert (raised.value.status, raised.value.field, len(seen)) == (status, body["field"], 1)
