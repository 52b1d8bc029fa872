"""The data-plane token rules (app/dataplane/tokens.py): claims, scopes, expiry, verification."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.dataplane.tokens import (
    ACK,
    APPEND,
    CHECKPOINT,
    FENCE,
    READ,
    RELEASE,
    Grant,
    Requirement,
    TokenRejected,
    authorize,
    claims_for,
    load_public_key,
    new_signing_key,
    public_pem,
    sign,
    verify,
)

KEY = new_signing_key()
NOW = 1_800_000_000.0
READ_Q1 = Grant(frozenset({READ}), stream="q1.out")


def issued(grant: Grant = READ_Q1, *, serving: str = "A", now: float = NOW, ttl: float = 60) -> str:
    return sign(claims_for("B", serving, grant, now=now, ttl=ttl), KEY)


def test_a_token_verifies_to_its_claims() -> None:
    claims = verify(issued(), [KEY.public_key()], audience="A", now=NOW + 1)
    assert (claims.subject, claims.audience, claims.grant) == ("B", "A", READ_Q1)
    assert claims.expires_at == NOW + 60


def test_the_public_key_travels_as_pem() -> None:
    key = load_public_key(public_pem(KEY.public_key()))
    assert verify(issued(), [key], audience="A", now=NOW).subject == "B"


@pytest.mark.parametrize(
    ("token", "audience", "now", "reason"),
    [
        (issued(), "A", NOW + 60, "expired"),
        (issued(), "C", NOW, "for 'A'"),
        (sign(claims_for("B", "A", READ_Q1, now=NOW, ttl=60), new_signing_key()), "A", NOW, "not"),
        (issued(now=NOW + 3600), "A", NOW, "future"),
        ("a.b", "A", NOW, "not a signed token"),
        ("", "A", NOW, "not a signed token"),
    ],
    ids=["expired", "another endpoint", "forged", "issued in the future", "two parts", "empty"],
)
def test_what_does_not_verify(token: str, audience: str, now: float, reason: str) -> None:
    with pytest.raises(TokenRejected, match=reason) as caught:
        verify(token, [KEY.public_key()], audience=audience, now=now)
    assert caught.value.unauthenticated


def test_a_tampered_payload_fails_the_signature() -> None:
    header, payload, signature = issued().split(".")
    raw = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    raw["grant"]["stream"] = "q2.out"  # widen the scope without the key
    forged = base64.urlsafe_b64encode(json.dumps(raw).encode()).rstrip(b"=").decode()
    with pytest.raises(TokenRejected, match="signature"):
        verify(f"{header}.{forged}.{signature}", [KEY.public_key()], audience="A", now=NOW)


def test_another_algorithm_is_refused_whatever_it_signs() -> None:
    _, payload, signature = issued().split(".")
    none = base64.urlsafe_b64encode(b'{"alg":"none"}').rstrip(b"=").decode()
    with pytest.raises(TokenRejected, match="only EdDSA"):
        verify(f"{none}.{payload}.{signature}", [KEY.public_key()], audience="A", now=NOW)


def test_a_key_being_replaced_still_verifies_beside_the_new_one() -> None:
    new = new_signing_key()
    assert verify(issued(), [new.public_key(), KEY.public_key()], audience="A", now=NOW)


@pytest.mark.parametrize(
    ("requirement", "reason"),
    [
        (Requirement.of(APPEND, stream="q1.out"), "needs append"),
        (Requirement.of(READ, stream="q2.out"), "stream 'q1.out', not 'q2.out'"),
        (Requirement.of(RELEASE, task="q1", movement=3), "needs release"),
    ],
)
def test_a_genuine_token_covers_only_its_scope(requirement: Requirement, reason: str) -> None:
    claims = verify(issued(), [KEY.public_key()], audience="A", now=NOW)
    with pytest.raises(TokenRejected, match=reason) as caught:
        authorize(claims, requirement)
    assert not caught.value.unauthenticated
    authorize(claims, Requirement.of(READ, APPEND, stream="q1.out"))  # any of the operations


def test_ack_is_bound_to_its_consumer_and_movement_to_its_movement() -> None:
    ack = Grant(frozenset({ACK}), stream="q1.out", consumer="q2")
    assert Requirement.of(ACK, stream="q1.out", consumer="q3").refusal(ack) is not None
    assert Requirement.of(ACK, stream="q1.out", consumer="q2").refusal(ack) is None
    ship = Grant(frozenset({CHECKPOINT}), task="q2", movement=7)
    assert Requirement.of(CHECKPOINT, task="q2", movement=8).refusal(ship) is not None
    assert Requirement.of(CHECKPOINT, task="q2", movement=7).refusal(ship) is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"operations": frozenset()}, "operations"),
        ({"operations": frozenset({"delete"})}, "operations"),
        ({"operations": frozenset({READ})}, "exactly one of stream or task"),
        ({"operations": frozenset({READ}), "stream": "s", "task": "t"}, "exactly one"),
        ({"operations": frozenset({RELEASE}), "stream": "s"}, "a stream grant"),
        ({"operations": frozenset({FENCE}), "task": "t"}, "a task grant"),
        ({"operations": frozenset({ACK}), "stream": "s"}, "consumer"),
    ],
)
def test_malformed_grants_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Grant(**fields)  # type: ignore[arg-type]


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)


@given(
    stream=names,
    other=names,
    ops=st.sets(st.sampled_from([READ, APPEND, FENCE]), min_size=1),
    asked=st.sampled_from([READ, APPEND, FENCE]),
)
def test_a_token_admits_exactly_the_requests_of_its_grant(
    stream: str, other: str, ops: set[str], asked: str
) -> None:
    grant = Grant(frozenset(ops), stream=stream)
    claims = verify(
        sign(claims_for("B", "A", grant, now=NOW), KEY), [KEY.public_key()], audience="A", now=NOW
    )
    assert claims.grant == grant  # the grant survives the wire unchanged
    admitted = Requirement.of(asked, stream=other).refusal(claims.grant) is None
    assert admitted == (asked in ops and other == stream)
