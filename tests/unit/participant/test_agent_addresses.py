"""``fedload agent``'s addresses: nothing assumed about loopback, bad ones refused by name."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from app.cli import cli
from app.participant.command import advertised_host
from spark_jobs.session import driver_addresses


@pytest.mark.parametrize(
    ("listen", "advertise", "expected"),
    [
        ("127.0.0.1:0", None, "127.0.0.1"),
        ("10.1.2.3:7001", None, "10.1.2.3"),
        ("0.0.0.0:7001", "10.0.0.1:7001", "10.0.0.1"),
        ("0.0.0.0:7001", "grpc://agent-a.example:7001", "agent-a.example"),
        ("0.0.0.0:7001", "agent-a.example", "agent-a.example"),
        ("0.0.0.0:7001", "grpc+tls://agent-a.example:7001", "agent-a.example"),
    ],
)
def test_the_advertised_host_is_what_partners_and_executors_reach(
    listen: str, advertise: str | None, expected: str
) -> None:
    assert advertised_host(listen, advertise) == expected


def test_the_spark_driver_binds_and_advertises_what_it_is_given() -> None:
    assert driver_addresses(None, None) == ("127.0.0.1", "127.0.0.1")
    assert driver_addresses("10.0.0.5", None) == ("10.0.0.5", "10.0.0.5")
    assert driver_addresses("0.0.0.0", "10.0.0.5") == ("0.0.0.0", "10.0.0.5")
    with pytest.raises(ValueError, match=r"spark.driver.host '0.0.0.0' is no address executors"):
        driver_addresses("0.0.0.0", None)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "0.0.0.0:7001"], "listens on every interface"),
        (["--listen", "10.0.0.1"], "expected HOST:PORT"),
        (["--listen", "0.0.0.0:7001", "--advertise", "0.0.0.0:7001"], "no address a partner"),
        (["--spark-master", "127.0.0.1:7077"], "is no Spark master URL"),
        (["--tls-cert", "a.pem"], "give both --tls-cert and --tls-key"),
        (["--tls-cert", "missing.pem", "--tls-key", "missing.pem"], "missing.pem is no file"),
        (["--bucket-seconds", "0.3"], "must divide one second (0.1, 0.2, 0.25, 0.5, 1), got 0.3"),
        (["--bucket-seconds", "0"], "must be between 0.01 and 1, got 0.0"),
        (["--bucket-seconds", "2"], "must be between 0.01 and 1, got 2.0"),
        (["--reconcile", "sideways"], "'sideways' is not one of alongside, alone, auto"),
    ],
)
def test_bad_addresses_are_refused_before_anything_starts(
    tmp_path, args: list[str], message: str
) -> None:
    result = CliRunner().invoke(
        cli,
        ["agent", "--participant", "A", "--key", "k", "--data-dir", str(tmp_path / "A"), *args],
        env={"COLUMNS": "300"},  # one line per message: no wrapping inside the error box
    )
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert not (tmp_path / "A").exists(), "a refused command created its data directory"
