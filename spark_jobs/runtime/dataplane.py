"""Tokens and TLS on the Flight data plane: the adapters around ``app.dataplane.tokens``.

The rule is one (``app.dataplane.tokens``: a token verifies under the service's key, is
addressed to the serving participant, is current and covers the request); this module fits it
to Flight:

- server side, ``FlightAuth``: a ``ServerMiddleware`` that refuses any call without a genuine,
  current token addressed to this participant before a handler runs (``unauthenticated``), and
  ``authorize`` that the handlers' guard (``transport.StreamServer``) calls with what the
  request needs (``unauthorized``: the token is genuine but for another stream, task, movement,
  consumer or operation);
- client side, token sources, asked per call for a ``Grant``: ``RegistryTokens`` (an agent: the
  registry decides and signs; cached until shortly before expiry, renewed in the background and
  spilled to a file), ``FileTokens`` (the Spark processes of the agent's queries read that
  file), ``FixedToken`` (one token carried by a Spark partition to an executor) and
  ``LocalIssuer`` (scenario drivers and tests without a registry: the same tokens, signed in
  process with a key of their own).

A process holds one client configuration (``use_client_defaults``): its token source and the
certificates it trusts for ``grpc+tls://`` endpoints. The agent sets it once at start; every
``StreamClient`` created without its own uses it.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

import pyarrow.flight as flight
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from app.dataplane.tokens import (
    DEFAULT_TTL_SECONDS,
    Claims,
    Grant,
    Requirement,
    TokenRejected,
    authorize,
    claims_for,
    sign,
    verify,
)
from app.participant.client import ApiError, FedloadClient

log = logging.getLogger("fedload.dataplane")

MIDDLEWARE_KEY = "fedload-token"
AUTHORIZATION = "authorization"
# Every refusal's message starts so: a client tells a refused token from a fenced write (both
# arrive as gRPC PERMISSION_DENIED) by it.
REFUSED = "data-plane token refused"
# The registry's answers that mean "not yours": anything else (a 503, no answer) is asked again.
REFUSALS = (401, 403, 404, 422)
# Verified tokens a server remembers (each a few hundred bytes); beyond it, expired ones go first.
VERIFIED_CACHE = 4096
# A cached token is renewed when less than this share of its life is left.
RENEW_FRACTION = 0.5


class TokenSource(Protocol):
    def token(self, location: str, grant: Grant) -> str | None: ...


class TokenUnavailable(PermissionError):
    """No token for a call: the registry could not be asked (and no held one is current)."""


class TokenRefused(TokenUnavailable):
    """The registry answered that the caller is not entitled to the token (any more)."""


def grant_key(grant: Grant) -> str:
    return json.dumps(grant.to_json(), sort_keys=True, separators=(",", ":"))


# -- client side ------------------------------------------------------------------------------
@dataclass(frozen=True)
class FixedToken:
    value: str | None

    def token(self, location: str, grant: Grant) -> str | None:
        return self.value


class LocalIssuer:
    """Signs tokens in process for ``caller``; ``names`` maps a Flight location to the
    participant serving it (scenario drivers and tests that run Flight without a registry)."""

    def __init__(
        self,
        caller: str,
        key: Ed25519PrivateKey,
        names: Mapping[str, str],
        *,
        ttl: float = DEFAULT_TTL_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.caller, self._key, self._names, self._ttl, self._clock = caller, key, names, ttl, clock

    def token(self, location: str, grant: Grant) -> str | None:
        serving = self._names.get(location)
        if serving is None:
            return None
        claims = claims_for(self.caller, serving, grant, now=self._clock(), ttl=self._ttl)
        return sign(claims, self._key)


class RegistryTokens:
    """An agent's tokens: asked of the registry once per grant, reused until half their life
    is left, renewed then by a background thread (so a long-running query's file never holds
    an expired one), and written to ``spill`` for the agent's Spark processes."""

    def __init__(
        self,
        fetch: Callable[[Grant], tuple[str, float]],
        *,
        spill: Path | None = None,
        clock: Callable[[], float] = time.time,
        renew_every: float = 5.0,
    ) -> None:
        """``fetch(grant)``: (token, expires at in epoch seconds) from the registry, raising
        when it refuses."""
        self._fetch, self.spill, self._clock = fetch, spill, clock
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Grant, str, float, float]] = {}  # key -> grant, token, iat, exp
        self._stopped = threading.Event()
        self._renewer: threading.Thread | None = None
        self._renew_every = renew_every

    def token(self, location: str, grant: Grant) -> str | None:
        key = grant_key(grant)
        with self._lock:
            held = self._held.get(key)
        if held is not None and not self._due(held):
            return held[1]
        try:
            return self._get(grant)
        except TokenRefused:
            raise
        except TokenUnavailable:
            # The registry is unreachable (restarting, say): a held token still in force keeps
            # the data plane going meanwhile, as the agents' fragments keep running.
            if held is not None and self._clock() < held[3]:
                return held[1]
            raise

    def _due(self, held: tuple[Grant, str, float, float]) -> bool:
        _, _, issued, expires = held
        return self._clock() >= expires - (expires - issued) * RENEW_FRACTION

    def _get(self, grant: Grant) -> str:
        try:
            token, expires = self._fetch(grant)
        except TokenRefused:
            raise
        except Exception as error:
            raise TokenUnavailable(
                f"no data-plane token for {grant.to_json()}: the registry was not reached: {error}"
            ) from error
        with self._lock:
            self._held[grant_key(grant)] = (grant, token, self._clock(), expires)
            snapshot = {k: v[1] for k, v in self._held.items()}
        self._write(snapshot)
        return token

    def _write(self, tokens: dict[str, str]) -> None:
        if self.spill is None:
            return
        self.spill.parent.mkdir(parents=True, exist_ok=True)
        descriptor, scratch = tempfile.mkstemp(dir=self.spill.parent, prefix=".tokens-")
        with os.fdopen(descriptor, "w") as out:  # 0600: bearer tokens
            json.dump(tokens, out)
        os.replace(scratch, self.spill)  # readers see the old file or the new, never half

    def renew(self) -> None:
        """Renew every held token past half its life; one the registry no longer grants (the
        task moved on) is forgotten."""
        with self._lock:
            due = [held for held in self._held.values() if self._due(held)]
        for grant, *_ in due:
            try:
                self._get(grant)
            except TokenRefused as error:
                # Not entitled any more (the task moved on): forget it, and drop it from the
                # spilled file. An unreachable registry forgets nothing: it is asked again. The
                # usual end of every movement's token, so DEBUG: at INFO it read as a fault on
                # every finished movement in the agents' logs.
                log.debug("forgetting a token the registry no longer grants: %s", error)
                with self._lock:
                    self._held.pop(grant_key(grant), None)
                    snapshot = {k: v[1] for k, v in self._held.items()}
                self._write(snapshot)
            except TokenUnavailable as error:
                log.warning("%s (kept until it expires)", error)

    def start(self) -> None:
        def loop() -> None:
            while not self._stopped.wait(self._renew_every):
                try:
                    self.renew()
                except Exception as error:  # the registry unreachable: try again next round
                    log.warning("renewing data-plane tokens: %s", error)

        self._renewer = threading.Thread(target=loop, name="dataplane-tokens", daemon=True)
        self._renewer.start()

    def stop(self) -> None:
        self._stopped.set()


def registry_tokens(client: FedloadClient, *, spill: Path | None = None) -> RegistryTokens:
    """Tokens the registry issues to ``client``'s key holder (an agent's participant; an
    operator's admin key gets read tokens)."""

    def fetch(grant: Grant) -> tuple[str, float]:
        try:
            issued = client.dataplane_token(grant.to_json())
        except ApiError as error:
            if error.status in REFUSALS:
                raise TokenRefused(
                    f"{REFUSED} by the registry for {grant.to_json()}: {error}"
                ) from error
            raise
        expires = datetime.fromisoformat(str(issued["expires_at"]).replace("Z", "+00:00"))
        return str(issued["token"]), expires.timestamp()

    return RegistryTokens(fetch, spill=spill)


@dataclass(frozen=True)
class FileTokens:
    """Tokens an agent spilled (``RegistryTokens.spill``), read by its Spark processes; None for
    a grant it holds no token for (the server then says the call had none)."""

    path: str

    def token(self, location: str, grant: Grant) -> str | None:
        try:
            with open(self.path) as file:
                held: dict[str, str] = json.load(file)
        except (FileNotFoundError, ValueError):
            return None
        return held.get(grant_key(grant))


@dataclass(frozen=True)
class ClientDefaults:
    tokens: TokenSource | None = None
    # PEM of the certificate authorities trusted for grpc+tls:// endpoints (None: the system's).
    tls_roots: bytes | None = None
    # Where the tokens and roots are for the Spark processes of this agent's queries.
    token_file: str | None = None
    tls_roots_file: str | None = None


_defaults = ClientDefaults()


def use_client_defaults(defaults: ClientDefaults) -> None:
    """This process's client configuration: one agent per process, set once at its start."""
    global _defaults
    _defaults = defaults


def client_defaults() -> ClientDefaults:
    return _defaults


def call_headers(
    tokens: TokenSource | None, location: str, grant: Grant
) -> list[tuple[bytes, bytes]]:
    if tokens is None:
        return []
    token = tokens.token(location, grant)
    return [] if token is None else [(AUTHORIZATION.encode(), f"Bearer {token}".encode())]


# -- server side ------------------------------------------------------------------------------
class _Claimed(flight.ServerMiddleware):
    def __init__(self, claims: Claims) -> None:
        self.claims = claims


class _Verify(flight.ServerMiddlewareFactory):
    def __init__(self, auth: FlightAuth) -> None:
        super().__init__()
        self._auth = auth
        # Tokens whose signature verified, with their claims: an agent sends one token for
        # minutes of calls, and the signature check cost as much as a small call itself
        # (bench/dataplane). Expiry is checked on every call all the same.
        self._verified: dict[str, Claims] = {}
        self._lock = threading.Lock()

    def _claims(self, token: str) -> Claims:
        now = self._auth.clock()
        with self._lock:
            known = self._verified.get(token)
        if known is not None and now < known.expires_at:
            return known
        claims = verify(token, self._auth.keys, audience=self._auth.participant, now=now)
        with self._lock:
            if len(self._verified) >= VERIFIED_CACHE:
                self._verified = {t: c for t, c in self._verified.items() if now < c.expires_at}
                if len(self._verified) >= VERIFIED_CACHE:
                    self._verified.clear()
            self._verified[token] = claims
        return claims

    def start_call(self, info: Any, headers: Mapping[str, list[Any]]) -> _Claimed:
        values = headers.get(AUTHORIZATION) or []
        raw = values[0] if values else None
        if isinstance(raw, bytes):
            raw = raw.decode("ascii", "replace")
        if not raw or not raw.startswith("Bearer "):
            raise flight.FlightUnauthenticatedError(
                f"{REFUSED}: the call carries no data-plane token "
                "(send 'authorization: Bearer <token from POST /v1/dataplane/tokens>')"
            )
        try:
            claims = self._claims(raw.removeprefix("Bearer "))
        except TokenRejected as error:
            raise flight.FlightUnauthenticatedError(f"{REFUSED}: {error.reason}") from None
        return _Claimed(claims)


@dataclass
class FlightAuth:
    """What a Flight server of ``participant`` accepts: tokens signed by one of ``keys``."""

    participant: str
    keys: tuple[Ed25519PublicKey, ...]
    clock: Callable[[], float] = time.time

    def middleware(self) -> dict[str, flight.ServerMiddlewareFactory]:
        return {MIDDLEWARE_KEY: _Verify(self)}

    def authorize(self, context: Any, requirement: Requirement) -> Claims:
        claimed = context.get_middleware(MIDDLEWARE_KEY)
        if claimed is None:  # the middleware refuses such a call first; never trust that here
            raise flight.FlightUnauthenticatedError(f"{REFUSED}: the call carries no token")
        try:
            authorize(claimed.claims, requirement)
        except TokenRejected as error:
            raise flight.FlightUnauthorizedError(f"{REFUSED}: {error.reason}") from None
        return claimed.claims


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a Flight endpoint's certificate and key, and of the authority that signed
    the partners' certificates (trusted by this process's clients)."""

    cert: Path
    key: Path
    ca: Path | None = None

    def server_certificates(self) -> list[flight.CertKeyPair]:
        return [flight.CertKeyPair(self.cert.read_bytes(), self.key.read_bytes())]
