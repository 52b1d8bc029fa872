"""Data-plane tokens: what a Flight call may do, signed by the service (issue 14, item 5).

The registry decides who may read, append to, fence or acknowledge a stream and who may release
or receive a fragment; the agents' Flight servers enforce it without asking the registry on every
call. The registry signs a short-lived token naming the caller, the serving participant (whose
endpoint it is for), the operations and the one stream or task (and movement) they apply to; a
server accepts a call only with a token that verifies under the service's public key, is addressed
to it, has not expired and covers the request. Ed25519: an agent holds the service's public key
only, so no agent can mint a token.

The format is a compact JWS (a JWT with ``alg: EdDSA``), so standard tools can read it; the rules
here are the whole of it: standard library and ``cryptography``, no web framework.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ISSUER = "fedload"
# Short: a token outlives the record that entitled it by at most this, and a stolen one soon
# stops working. Long beside a call, so an agent asks the registry once per scope per minutes.
DEFAULT_TTL_SECONDS = 300.0
# A server accepts tokens issued slightly "in the future" (clocks of two machines differ).
CLOCK_SKEW_SECONDS = 30.0

# The operations, each one a scope of a Flight call (``spark_jobs/runtime/transport.py`` maps
# every request to one):
READ = "read"  # DoGet read, info
APPEND = "append"  # DoPut append, advance (a BOUNDARY), declare
FENCE = "fence"  # raise a stream's fence
ACK = "ack"  # acknowledge (trim) a stream as one named consumer
RELEASE = "release"  # stop a fragment for a prepared movement and hand over its checkpoint
CHECKPOINT = "checkpoint"  # push (or discard) a checkpoint for a movement
REINSTATE = "reinstate"  # run a released fragment again after an aborted movement
RETIRE = "retire"  # forget a fragment after a committed movement
# Push (or discard) a passive standby's checkpoint at a replica holder: for a task, under no
# movement (the standby is shipped while the host runs; a failover later moves it).
STANDBY = "standby"
STREAM_OPERATIONS = frozenset({READ, APPEND, FENCE, ACK})
TASK_OPERATIONS = frozenset({RELEASE, CHECKPOINT, REINSTATE, RETIRE, STANDBY})
OPERATIONS = STREAM_OPERATIONS | TASK_OPERATIONS


class TokenRejected(PermissionError):
    """A call's token does not admit it. ``unauthenticated``: no token, or one that is not the
    service's, is expired or is addressed to another server; otherwise it is genuine but does not
    cover this request (wrong stream, task, movement, consumer or operation)."""

    def __init__(self, reason: str, *, unauthenticated: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.unauthenticated = unauthenticated


@dataclass(frozen=True)
class Grant:
    """What a token allows: ``operations`` on one stream, or on one task (for one movement)."""

    operations: frozenset[str]
    stream: str | None = None
    task: str | None = None
    movement: int | None = None
    # The consumer name an ``ack`` may use (a consumer trims only its own position).
    consumer: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(self.operations - OPERATIONS)
        if not self.operations or unknown:
            raise ValueError(f"grant: operations must be among {sorted(OPERATIONS)}, got {unknown}")
        if (self.stream is None) == (self.task is None):
            raise ValueError("grant: names exactly one of stream or task")
        if self.stream is not None and not self.operations <= STREAM_OPERATIONS:
            raise ValueError(f"grant: a stream grant allows only {sorted(STREAM_OPERATIONS)}")
        if self.task is not None and not self.operations <= TASK_OPERATIONS:
            raise ValueError(f"grant: a task grant allows only {sorted(TASK_OPERATIONS)}")
        if ACK in self.operations and self.consumer is None:
            raise ValueError("grant: ack needs the consumer it acknowledges as")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"ops": sorted(self.operations)}
        for name in ("stream", "task", "movement", "consumer"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> Grant:
        movement = raw.get("movement")
        return cls(
            operations=frozenset(str(op) for op in raw.get("ops", ())),
            stream=raw.get("stream"),
            task=raw.get("task"),
            movement=None if movement is None else int(movement),
            consumer=raw.get("consumer"),
        )


@dataclass(frozen=True)
class Requirement:
    """What one Flight request needs: any of ``operations`` on exactly these fields (a field left
    None is not checked, e.g. ``retire`` names no movement)."""

    operations: frozenset[str]
    stream: str | None = None
    task: str | None = None
    movement: int | None = None
    consumer: str | None = None

    @classmethod
    def of(cls, *operations: str, **fields: Any) -> Requirement:
        return cls(frozenset(operations), **fields)

    def refusal(self, grant: Grant) -> str | None:
        """Why ``grant`` does not cover this request; None when it does."""
        if not self.operations & grant.operations:
            return f"needs {' or '.join(sorted(self.operations))}, the token allows " + ", ".join(
                sorted(grant.operations)
            )
        for name in ("stream", "task", "movement", "consumer"):
            wanted = getattr(self, name)
            if wanted is not None and getattr(grant, name) != wanted:
                return f"the token is for {name} {getattr(grant, name)!r}, not {wanted!r}"
        return None


@dataclass(frozen=True)
class Claims:
    subject: str  # the calling participant
    audience: str  # the participant whose Flight endpoint serves the call
    grant: Grant
    issued_at: float
    expires_at: float
    issuer: str = ISSUER
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.extra,
            "iss": self.issuer,
            "sub": self.subject,
            "aud": self.audience,
            "iat": self.issued_at,
            "exp": self.expires_at,
            "grant": self.grant.to_json(),
        }


def claims_for(
    caller: str, serving: str, grant: Grant, *, now: float, ttl: float = DEFAULT_TTL_SECONDS
) -> Claims:
    if ttl <= 0:
        raise ValueError(f"token lifetime must be positive, got {ttl}")
    return Claims(caller, serving, grant, issued_at=now, expires_at=now + ttl)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


_HEADER = _b64(json.dumps({"alg": "EdDSA", "typ": "JWT"}, separators=(",", ":")).encode())


def sign(claims: Claims, key: Ed25519PrivateKey) -> str:
    payload = _b64(json.dumps(claims.to_json(), separators=(",", ":"), sort_keys=True).encode())
    signed = f"{_HEADER}.{payload}"
    return f"{signed}.{_b64(key.sign(signed.encode('ascii')))}"


def verify(token: str, keys: Iterable[Ed25519PublicKey], *, audience: str, now: float) -> Claims:
    """The claims of a genuine, current token addressed to ``audience``; ``TokenRejected``
    (unauthenticated) otherwise. ``keys``: the service's public keys in force (more than one
    while a key is being replaced)."""

    def reject(reason: str) -> TokenRejected:
        return TokenRejected(reason, unauthenticated=True)

    parts = token.split(".")
    if len(parts) != 3:
        raise reject("the token is not a signed token (header.payload.signature)")
    header, payload, signature = parts
    try:
        alg = json.loads(_unb64(header)).get("alg")
        raw_signature = _unb64(signature)
    except (ValueError, binascii.Error, AttributeError) as error:
        raise reject(f"the token is malformed: {error}") from None
    if alg != "EdDSA":
        raise reject(f"the token's algorithm is {alg!r}, only EdDSA is accepted")
    signed = f"{header}.{payload}".encode("ascii")
    for key in keys:
        try:
            key.verify(raw_signature, signed)
            break
        except InvalidSignature:
            continue
    else:
        raise reject("the token's signature is not the service's")
    try:
        raw = json.loads(_unb64(payload))
        claims = Claims(
            subject=str(raw["sub"]),
            audience=str(raw["aud"]),
            grant=Grant.from_json(raw["grant"]),
            issued_at=float(raw["iat"]),
            expires_at=float(raw["exp"]),
            issuer=str(raw["iss"]),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise reject(f"the token's claims are malformed: {error}") from None
    if claims.issuer != ISSUER:
        raise reject(f"the token was issued by {claims.issuer!r}, not {ISSUER!r}")
    if claims.audience != audience:
        raise reject(f"the token is for {claims.audience!r}'s endpoint, this is {audience!r}'s")
    if now >= claims.expires_at:
        raise reject(f"the token expired {now - claims.expires_at:.0f} s ago")
    if claims.issued_at > now + CLOCK_SKEW_SECONDS:
        raise reject("the token is issued in the future (clocks differ by more than the skew)")
    return claims


def authorize(claims: Claims, requirement: Requirement) -> None:
    """``TokenRejected`` (not unauthenticated: the caller is known, the scope is wrong) unless
    the token's grant covers the request."""
    reason = requirement.refusal(claims.grant)
    if reason is not None:
        raise TokenRejected(f"{claims.subject}: {reason}", unauthenticated=False)


# -- keys -----------------------------------------------------------------------------------
def new_signing_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def load_public_key(pem: str | bytes) -> Ed25519PublicKey:
    data = pem.encode("ascii") if isinstance(pem, str) else pem
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as error:
        raise ValueError(f"not a PEM public key: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"the service's key must be Ed25519, got {type(key).__name__}")
    return key


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The service's signing key from a PEM file (``ValueError`` naming the file otherwise)."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except ValueError as error:
        raise ValueError(
            f"data-plane signing key {path}: not a PEM private key ({error})"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"data-plane signing key {path} must be Ed25519, got {type(key).__name__}")
    return key
