"""A fragment's Spark query on an authenticated data plane (issue 14, item 5): its input is
read, acknowledged and its output appended and advanced only with tokens, including by the
query's own Python processes (SUnion's planner and readers run apart from the runtime's
process: they read the tokens the runtime's source spilled, and each partition carries its read
token to its executor). The tokens come from the agents' adapter (``RegistryTokens``) with the
registry's signing done in process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.dataplane.tokens import Grant, claims_for, new_signing_key, sign
from spark_jobs.runtime.dataplane import (
    ClientDefaults,
    FlightAuth,
    RegistryTokens,
    client_defaults,
    use_client_defaults,
)
from spark_jobs.runtime.transport import StreamServer
from tests.integration.runtime.conftest import (
    BUCKET,
    GENERATOR,
    declare,
    ports_fragment,
    rows,
)

pytestmark = pytest.mark.spark

KEY = new_signing_key()
FIRST = int(GENERATOR.epoch.timestamp() // BUCKET)
SERVES = {"conns": "P", "out": "H"}  # stream -> the participant whose endpoint keeps it


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[tuple[dict[str, StreamServer], RegistryTokens]]:
    servers = {
        "source": StreamServer(auth=FlightAuth("P", (KEY.public_key(),))),
        "home": StreamServer(auth=FlightAuth("H", (KEY.public_key(),))),
    }

    def fetch(grant: Grant) -> tuple[str, float]:
        assert grant.stream is not None
        claims = claims_for("R", SERVES[grant.stream], grant, now=time.time(), ttl=120)
        return sign(claims, KEY), claims.expires_at

    tokens = RegistryTokens(fetch, spill=tmp_path / "tokens.json")
    before = client_defaults()
    use_client_defaults(ClientDefaults(tokens=tokens, token_file=str(tokens.spill)))
    try:
        yield servers, tokens
    finally:
        use_client_defaults(before)
        for server in servers.values():
            server.shutdown()


def test_a_fragment_runs_with_tokens_only(secured, make_runtime) -> None:
    servers, _ = secured
    declare(servers["source"], "conns").close()
    declare(servers["home"], "out").close()
    with declare(servers["source"]) as source:
        source.append("conns", GENERATOR.seconds(0, 15), boundary=FIRST + 15)
    spec = ports_fragment("frag", servers["source"], "conns", servers["home"], "out")
    host = make_runtime("R")
    host.start(spec, epoch=1).processAllAvailable()
    host.stop("frag")
    out = rows(servers["home"].log.table("out"))
    assert out, "the query wrote nothing: its processes could not use the tokens"
    acks = servers["source"].log.info("conns")["acks"]
    assert acks.get("frag", 0) > 0, f"the query's commit did not acknowledge its input: {acks}"
    assert servers["home"].log.info("out")["boundary"] is not None
