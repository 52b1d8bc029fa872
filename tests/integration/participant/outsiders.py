"""Outsiders against real agents (issue 14, item 5): with O.x running at T after a move, calls
without a token, with a forged one, and with genuine registry-issued tokens used beyond their
scope try to release the running fragment, trim its input and fence its output. Every one is
refused; over TLS, a client that does not trust the agents' authority, or speaks plain gRPC, is
not spoken to even with a genuine token. Afterwards T still hosts O.x, its position in
O.conns.out and the output's fence are as before, and its output keeps growing (a fence or a
trim would have stopped it)."""

from __future__ import annotations

import time
from typing import Any

import pyarrow.flight as flight
import pytest

from app.dataplane.tokens import ACK, READ, RELEASE, Grant, claims_for, sign
from app.dataplane.tokens import new_signing_key as forger_key
from app.participant.client import ApiError
from spark_jobs.runtime.dataplane import REFUSED, FixedToken, registry_tokens
from spark_jobs.runtime.transport import StreamClient
from spark_jobs.scenarios.processes import ProcessFederation
from tests.integration.participant.agents import grows, host_of
from tests.support.certificates import issue


def _refused(call: Any, kind: type[flight.FlightError]) -> str:
    with pytest.raises(Exception) as caught:
        call()
    error: BaseException = caught.value
    while not isinstance(error, flight.FlightError) and error.__cause__ is not None:
        error = error.__cause__
    assert isinstance(error, kind), repr(caught.value)
    assert REFUSED in str(caught.value)
    return str(caught.value)


def probe_outsiders(fed: ProcessFederation) -> None:
    admin = fed.admin()
    assert host_of(admin, "O.x") == "T"
    moved = max(
        (m for m in admin.movements() if m["task"] == "O.x" and m["status"] == "committed"),
        key=lambda m: m["id"],
    )
    at_o, at_t = admin.endpoint("O"), admin.endpoint("T")
    assert at_o is not None and at_t is not None
    with StreamClient(at_o, tokens=registry_tokens(fed.client("O"))) as owner:
        before_input = owner.info("O.conns.out")
        before_output = owner.info("O.x.out")

    release = Grant(frozenset({RELEASE}), task="O.x", movement=int(moved["id"]))
    forged = sign(claims_for("S", "T", release, now=time.time()), forger_key())
    for token in (None, forged):
        with StreamClient(at_t, tokens=FixedToken(token)) as outsider:
            _refused(
                lambda c=outsider: c.release("O.x", int(moved["id"])),
                flight.FlightUnauthenticatedError,
            )

    # S, the move's source, is no longer entitled to release it: the registry says no.
    with pytest.raises(ApiError) as refused:
        fed.client("S").dataplane_token(release.to_json())
    assert refused.value.status in (403, 404)

    # Genuine tokens beyond their scope. O owns the streams and may read them; T runs O.x and
    # may acknowledge O.conns.out as O.x. Neither may fence, or trim as another consumer.
    o_read = registry_tokens(fed.client("O")).token(
        at_o, Grant(frozenset({READ}), stream="O.x.out")
    )
    t_ack = registry_tokens(fed.client("T")).token(
        at_o, Grant(frozenset({ACK}), stream="O.conns.out", consumer="O.x")
    )
    with StreamClient(at_o, tokens=FixedToken(o_read)) as reader:
        _refused(lambda: reader.fence("O.x.out", 10**9), flight.FlightUnauthorizedError)
        _refused(lambda: reader.ack("O.conns.out", "O.x", 10**12), flight.FlightUnauthorizedError)
    with StreamClient(at_o, tokens=FixedToken(t_ack)) as acker:
        _refused(lambda: acker.ack("O.conns.out", "O.y", 10**12), flight.FlightUnauthorizedError)
    # An honest token for another endpoint: O's read token at T.
    with StreamClient(at_t, tokens=FixedToken(o_read)) as elsewhere:
        _refused(lambda: elsewhere.info("O.x.out"), flight.FlightUnauthenticatedError)
    with pytest.raises(ApiError):  # nor will the registry give O an ack token as O.x
        fed.client("O").dataplane_token(
            Grant(frozenset({ACK}), stream="O.conns.out", consumer="O.x").to_json()
        )

    if at_o.startswith("grpc+tls://"):
        # O's genuine read token at O's own endpoint: what stops these calls is TLS alone.
        _probe_tls(fed, at_o, o_read)

    grows(fed.admin(), "O.x")
    assert host_of(admin, "O.x") == "T"
    with StreamClient(at_o, tokens=registry_tokens(fed.client("O"))) as owner:
        after_input = owner.info("O.conns.out")
        after_output = owner.info("O.x.out")
    assert after_output["fence"] == before_output["fence"] < 10**9
    assert set(after_input["acks"]) == set(before_input["acks"]), "a consumer was made up"
    assert after_input["acks"]["O.x"] < 10**12, "an outsider trimmed O.x's input"


def _probe_tls(fed: ProcessFederation, at: str, token: str | None) -> None:
    """Without the federation's authority (a stranger's CA, as a man in the middle would
    present) or without TLS, the endpoint is not reached at all, whatever token is sent."""
    stranger = issue(fed.work / "stranger-tls", authority="a stranger's CA").ca.read_bytes()
    untrusting = StreamClient(at, tokens=FixedToken(token), tls_roots=stranger, timeout=5)
    with untrusting, pytest.raises(flight.FlightUnavailableError):
        untrusting.info("O.x.out")
    plain = StreamClient(at.replace("grpc+tls://", "grpc://"), tokens=FixedToken(token), timeout=5)
    with plain, pytest.raises(flight.FlightError):
        plain.info("O.x.out")
