"""TLS on the data plane (issue 14, item 5): a stream read between two processes over
``grpc+tls://``, with certificates made at run time, and what a client that does not trust the
endpoint's authority, or that skips TLS, gets."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.flight as flight
import pytest

from app.dataplane.tokens import READ, Grant, claims_for, new_signing_key, public_pem, sign
from spark_jobs.runtime.dataplane import FixedToken
from spark_jobs.runtime.transport import StreamClient
from tests.integration.runtime.tls_endpoint import ROWS
from tests.support.certificates import Issued, issue

KEY = new_signing_key()
READ_Q1 = Grant(frozenset({READ}), stream="q1.out")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls")


@pytest.fixture(scope="module")
def certificates(work: Path) -> Issued:
    return issue(work / "tls")


@pytest.fixture(scope="module")
def endpoint(work: Path, certificates: Issued) -> Iterator[str]:
    """One endpoint process for the module (its start, imports included, is most of the cost)."""
    public = work / "service.pub"
    public.write_text(public_pem(KEY.public_key()))
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.integration.runtime.tls_endpoint",
            str(certificates.cert),
            str(certificates.key),
            str(public),
            "A",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdin is not None
    location = process.stdout.readline().strip()
    try:
        assert location.startswith("grpc+tls://127.0.0.1:"), location
        yield location
    finally:
        process.stdin.close()
        process.wait(timeout=30)


def token() -> str:
    return sign(claims_for("B", "A", READ_Q1, now=time.time()), KEY)


def test_a_stream_is_read_over_tls_from_another_process(
    endpoint: str, certificates: Issued
) -> None:
    roots = certificates.ca.read_bytes()
    with StreamClient(endpoint, tokens=FixedToken(token()), tls_roots=roots) as client:
        assert client.read_table("q1.out").to_pylist() == ROWS.to_pylist()
    # Over TLS the token is still required.
    anonymous = StreamClient(endpoint, tokens=FixedToken(None), tls_roots=roots)
    with anonymous, pytest.raises(flight.FlightUnauthenticatedError, match="no data-plane token"):
        anonymous.info("q1.out")


def test_an_endpoint_of_an_untrusted_authority_or_plain_grpc_is_not_spoken_to(
    endpoint: str, tmp_path: Path
) -> None:
    stranger = issue(tmp_path / "other", authority="another CA").ca.read_bytes()
    untrusting = StreamClient(endpoint, tokens=FixedToken(token()), tls_roots=stranger, timeout=5)
    with untrusting, pytest.raises(flight.FlightUnavailableError):
        untrusting.info("q1.out")
    plain = StreamClient(
        endpoint.replace("grpc+tls://", "grpc://"), tokens=FixedToken(token()), timeout=5
    )
    with plain, pytest.raises(flight.FlightError):
        plain.info("q1.out")
