"""An agent's token cache (spark_jobs/runtime/dataplane.py ``RegistryTokens``): one request per
grant until half its life, renewed then; an unreachable registry does not stop a data plane
whose tokens are still in force; a refused renewal forgets the token, in the spilled file too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.dataplane.tokens import READ, Grant
from spark_jobs.runtime.dataplane import (
    FileTokens,
    RegistryTokens,
    TokenRefused,
    TokenUnavailable,
    grant_key,
)

GRANT = Grant(frozenset({READ}), stream="q1.out")


class Registry:
    def __init__(self) -> None:
        self.now = 1000.0
        self.asked = 0
        self.answer: str = "up"  # "up", "down" or "refuses"

    def fetch(self, grant: Grant) -> tuple[str, float]:
        self.asked += 1
        if self.answer == "down":
            raise ConnectionError("the registry does not answer")
        if self.answer == "refuses":
            raise TokenRefused("not yours")
        return f"token-{self.asked}", self.now + 100


@pytest.fixture
def registry() -> Registry:
    return Registry()


def test_one_request_per_grant_until_half_its_life(registry: Registry, tmp_path: Path) -> None:
    tokens = RegistryTokens(registry.fetch, spill=tmp_path / "t.json", clock=lambda: registry.now)
    assert tokens.token("x", GRANT) == "token-1"
    registry.now += 49
    assert tokens.token("x", GRANT) == "token-1"
    assert registry.asked == 1
    registry.now += 2  # past half its life: renewed
    assert tokens.token("x", GRANT) == "token-2"
    assert FileTokens(str(tmp_path / "t.json")).token("y", GRANT) == "token-2"


def test_an_unreachable_registry_keeps_tokens_in_force_until_they_expire(
    registry: Registry, tmp_path: Path
) -> None:
    tokens = RegistryTokens(registry.fetch, spill=tmp_path / "t.json", clock=lambda: registry.now)
    tokens.token("x", GRANT)
    registry.answer, registry.now = "down", registry.now + 80
    tokens.renew()
    assert tokens.token("x", GRANT) == "token-1"
    assert FileTokens(str(tmp_path / "t.json")).token("y", GRANT) == "token-1"
    registry.now += 30  # expired, and still no registry
    with pytest.raises(TokenUnavailable, match="does not answer"):
        tokens.token("x", GRANT)


def test_a_refused_renewal_forgets_the_token_everywhere(
    registry: Registry, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spill = tmp_path / "t.json"
    tokens = RegistryTokens(registry.fetch, spill=spill, clock=lambda: registry.now)
    tokens.token("x", GRANT)
    registry.answer, registry.now = "refuses", registry.now + 60
    with caplog.at_level("DEBUG", logger="fedload.dataplane"):
        tokens.renew()
    # The usual end of a finished movement's token: said at DEBUG, never as a fault.
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [("DEBUG", "forgetting a token the registry no longer grants: not yours")]
    assert grant_key(GRANT) not in json.loads(spill.read_text())
    with pytest.raises(TokenRefused):
        tokens.token("x", GRANT)
    assert spill.stat().st_mode & 0o077 == 0, "bearer tokens readable by others"
