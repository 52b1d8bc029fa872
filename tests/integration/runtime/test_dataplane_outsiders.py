"""The outsider table of the data plane (issue 14, item 5): every Flight operation an agent's
endpoint serves, tried by an outsider (no token, a forged one, an expired one, one for another
endpoint) and by the wrong partner (a genuine token for another stream, task, movement, consumer
or operation). Each is refused, says why, and changes nothing: stream contents, fences,
acknowledgements, shipped and released checkpoints, the fragments the host runs. The rightful
token then succeeds, so the refusals are the tokens', not a closed door.

A real ``StreamServer`` with the agents' ``FlightAuth`` over real gRPC; the host handler is a
small stand-in recording what it was asked to do (the agent's own handler is run by the agent
process tests, which call it with registry-issued tokens).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from app.dataplane.tokens import (
    ACK,
    APPEND,
    CHECKPOINT,
    FENCE,
    READ,
    REINSTATE,
    RELEASE,
    RETIRE,
    Grant,
    claims_for,
    new_signing_key,
    sign,
)
from spark_jobs.runtime.checkpoint_tree import TreeDelta
from spark_jobs.runtime.dataplane import REFUSED, FixedToken, FlightAuth
from spark_jobs.runtime.transport import PackedCheckpoint, StreamClient, StreamServer

KEY = new_signing_key()
SERVING = "A"
STREAM, OTHER_STREAM = "q1.out", "q9.out"
FRAGMENT, MOVEMENT, RELEASED = "q2", 7, 8


class RecordingHandler:
    """Runs ``q2`` until asked otherwise; records every request it acted on."""

    def __init__(self) -> None:
        self.running = {FRAGMENT}
        self.calls: list[tuple[str, str]] = []

    def release_for(self, fragment: str, movement: int) -> PackedCheckpoint:
        self.calls.append(("release", fragment))
        self.running.discard(fragment)
        return PackedCheckpoint.of(b"state of " + fragment.encode())

    def reinstate(self, fragment: str, epoch: int) -> None:
        self.calls.append(("reinstate", fragment))
        self.running.add(fragment)

    def retire(self, fragment: str) -> None:
        self.calls.append(("retire", fragment))
        self.running.discard(fragment)


def rows(*stimes: int) -> pa.Table:
    return pa.table({"stime": pa.array(stimes, pa.timestamp("us", tz="UTC")), "v": list(stimes)})


@pytest.fixture
def server() -> Iterator[StreamServer]:
    made = StreamServer(auth=FlightAuth(SERVING, (KEY.public_key(),)))
    made.handler = RecordingHandler()
    log = made.log
    log.declare(STREAM, 1.0)
    log.declare(OTHER_STREAM, 1.0)
    log.append(STREAM, rows(1_000_000, 2_000_000, 3_000_000), boundary=3, batch_id=1, epoch=3)
    log.ack(STREAM, "q2", 1)
    made._inbox[(FRAGMENT, MOVEMENT)] = PackedCheckpoint.of(b"shipped copy")
    made._outbox[(FRAGMENT, RELEASED)] = PackedCheckpoint.of(b"released copy")
    yield made
    made.shutdown()


def state(server: StreamServer) -> dict[str, Any]:
    handler = server.handler
    assert isinstance(handler, RecordingHandler)
    return {
        "streams": {
            s: (server.log.info(s), server.log.table(s).to_pylist())
            for s in sorted(server.log._streams)
        },
        "inbox": {k: v.sha256 for k, v in server._inbox.items()},
        "outbox": {k: v.sha256 for k, v in server._outbox.items()},
        "running": sorted(handler.running),
        "calls": list(handler.calls),
    }


@dataclass(frozen=True)
class Operation:
    name: str
    grant: Grant
    call: Callable[[StreamClient], Any]


DELTA = TreeDelta(base="0" * 64, result="1" * 64, changed={"x": b"1"}, removed=())


def _on_stream(op: str, **extra: Any) -> Grant:
    return Grant(frozenset({op}), stream=STREAM, **extra)


def _on_task(op: str, movement: int = MOVEMENT) -> Grant:
    return Grant(frozenset({op}), task=FRAGMENT, movement=movement)


OPERATIONS = [
    Operation("read", _on_stream(READ), lambda c: c.read_table(STREAM, 0, 10)),
    Operation("info", _on_stream(READ), lambda c: c.info(STREAM)),
    Operation("append", _on_stream(APPEND), lambda c: c.append(STREAM, rows(5_000_000))),
    Operation("advance", _on_stream(APPEND), lambda c: c.advance(STREAM, 9)),
    Operation("declare", _on_stream(APPEND), lambda c: c.declare(STREAM, 1.0)),
    Operation("fence", _on_stream(FENCE), lambda c: c.fence(STREAM, 99)),
    Operation("ack", _on_stream(ACK, consumer="q2"), lambda c: c.ack(STREAM, "q2", 3)),
    Operation(
        "checkpoint push",
        _on_task(CHECKPOINT),
        lambda c: c.ship_checkpoint(FRAGMENT, MOVEMENT, PackedCheckpoint.of(b"evil state")),
    ),
    Operation(
        "checkpoint delta",
        _on_task(CHECKPOINT),
        lambda c: c.ship_checkpoint_delta(FRAGMENT, MOVEMENT, DELTA),
    ),
    Operation(
        "discard checkpoint",
        _on_task(CHECKPOINT),
        lambda c: c.discard_checkpoint(FRAGMENT, MOVEMENT),
    ),
    Operation("release", _on_task(RELEASE), lambda c: c.release(FRAGMENT, MOVEMENT)),
    Operation(
        "pull released checkpoint",
        _on_task(RELEASE, RELEASED),
        lambda c: c._client.do_get(
            flight.Ticket(b'{"op": "checkpoint", "fragment": "q2", "movement": 8}'),
            c._options(_on_task(RELEASE, RELEASED)),
        ).read_all(),
    ),
    Operation(
        "reinstate",
        _on_task(REINSTATE),
        lambda c: c.reinstate(FRAGMENT, 1, movement=MOVEMENT),
    ),
    Operation("retire", _on_task(RETIRE), lambda c: c.retire(FRAGMENT, movement=MOVEMENT)),
]


def token(grant: Grant, *, key: Any = KEY, serving: str = SERVING, age: float = 0.0) -> str:
    claims = claims_for("B", serving, grant, now=time.time() - age, ttl=60)
    return sign(claims, key)


def outsiders(grant: Grant) -> dict[str, str | None]:
    return {
        "no token": None,
        "forged (another key)": token(grant, key=new_signing_key()),
        "expired": token(grant, age=120),
        "for another endpoint": token(grant, serving="B"),
        "garbage": "not.a.token",
    }


def wrong_partners(grant: Grant) -> dict[str, str]:
    if grant.stream is not None:
        other_op = READ if FENCE in grant.operations else FENCE
        wrong = {
            "another stream": dataclasses.replace(grant, stream=OTHER_STREAM),
            "another operation": Grant(frozenset({other_op}), stream=STREAM),
        }
        if grant.consumer is not None:
            wrong["another consumer"] = dataclasses.replace(grant, consumer="q3")
    else:
        other_op = RELEASE if RETIRE in grant.operations else RETIRE
        wrong = {
            "another task": dataclasses.replace(grant, task="q3"),
            "another movement": dataclasses.replace(grant, movement=(grant.movement or 0) + 100),
            "another operation": dataclasses.replace(grant, operations=frozenset({other_op})),
        }
    return {name: token(g) for name, g in wrong.items()}


def flight_error(error: BaseException) -> BaseException:
    """The Flight error under the client's own wrapping (TransferError, AccessRefused)."""
    while not isinstance(error, flight.FlightError) and error.__cause__ is not None:
        error = error.__cause__
    return error


@pytest.mark.parametrize("operation", OPERATIONS, ids=[o.name for o in OPERATIONS])
def test_outsiders_and_wrong_partners_are_refused_and_change_nothing(
    server: StreamServer, operation: Operation
) -> None:
    before = state(server)
    cases = [
        *(
            (f"outsider: {n}", t, flight.FlightUnauthenticatedError)
            for n, t in outsiders(operation.grant).items()
        ),
        *(
            (f"wrong partner: {n}", t, flight.FlightUnauthorizedError)
            for n, t in wrong_partners(operation.grant).items()
        ),
    ]
    for name, sent, kind in cases:
        client = StreamClient(server.location, tokens=FixedToken(sent))
        with client, pytest.raises(Exception) as caught:
            operation.call(client)
        error = flight_error(caught.value)
        assert isinstance(error, kind), f"{operation.name} as {name}: {caught.value!r}"
        assert REFUSED in str(caught.value), f"{operation.name} as {name}: {caught.value}"
        assert state(server) == before, f"{operation.name} as {name} changed the endpoint"
    # The rightful token is accepted, so the refusals above were the tokens' doing.
    with StreamClient(server.location, tokens=FixedToken(token(operation.grant))) as client:
        try:
            operation.call(client)
        except Exception as error:  # a domain refusal (e.g. the delta's base) is no token's
            assert REFUSED not in str(error), f"{operation.name} rightfully: {error}"


def test_refusals_say_why(server: StreamServer) -> None:
    anonymous = StreamClient(server.location, tokens=FixedToken(None))
    with anonymous, pytest.raises(flight.FlightUnauthenticatedError, match="carries no"):
        anonymous.info(STREAM)
    late = StreamClient(server.location, tokens=FixedToken(token(_on_stream(READ), age=120)))
    with late, pytest.raises(flight.FlightUnauthenticatedError, match="expired"):
        late.info(STREAM)
    reader = token(_on_stream(READ))
    with StreamClient(server.location, tokens=FixedToken(reader)) as client:
        with pytest.raises(flight.FlightUnauthorizedError, match="needs fence"):
            client.fence(STREAM, 99)
        with pytest.raises(flight.FlightUnauthorizedError, match=r"'q1\.out', not 'q9\.out'"):
            client.info(OTHER_STREAM)


def test_an_action_without_a_declared_scope_is_refused_even_with_a_token() -> None:
    class Extended(StreamServer):
        def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
            if action.type == "promote":
                self.promoted = True
                yield b"null"
                return
            yield from super().do_action(context, action)

    made = Extended(auth=FlightAuth(SERVING, (KEY.public_key(),)))
    made.promoted = False
    try:
        client = StreamClient(made.location, tokens=FixedToken(token(_on_task(RELEASE))))
        with client, pytest.raises(flight.FlightUnauthorizedError, match="declares no scope"):
            client._action("promote", _on_task(RELEASE))
        assert made.promoted is False
    finally:
        made.shutdown()


def test_a_token_verified_once_is_still_refused_once_it_expires() -> None:
    now = [time.time()]
    made = StreamServer(auth=FlightAuth(SERVING, (KEY.public_key(),), clock=lambda: now[0]))
    made.log.declare(STREAM, 1.0)
    try:
        client = StreamClient(made.location, tokens=FixedToken(token(_on_stream(READ))))
        with client:
            assert client.info(STREAM)["rows"] == 0  # verified, and remembered
            now[0] += 61  # the token's 60 s are over
            with pytest.raises(flight.FlightUnauthenticatedError, match="expired"):
                client.info(STREAM)
    finally:
        made.shutdown()
