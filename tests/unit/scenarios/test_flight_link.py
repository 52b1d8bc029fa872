"""The consumer's link to a DPC copy: a state call that times out is the link's failure (a read
error the consumer counts per replica and retries), not an error of the consumer's loop."""

from __future__ import annotations

from typing import Any

import pyarrow.flight as flight
import pytest

from spark_jobs.runtime.transport import TransferError
from spark_jobs.scenarios.replicas import FlightLink


class TimingOut:
    """A StreamClient whose action calls time out as ``StreamClient.call`` reports it."""

    closed = False

    def call(self, kind: str, grant: Any, **body: Any) -> Any:
        try:
            raise flight.FlightTimedOutError("Deadline Exceeded")
        except flight.FlightError as error:
            raise TransferError(str(error)) from error

    def close(self) -> None:
        self.closed = True


def test_a_state_call_that_times_out_is_a_flight_error_and_drops_the_channel() -> None:
    link = FlightLink("grpc://127.0.0.1:1", "O.x.out@T", None, timeout=0.1)
    client = TimingOut()
    link._client = client  # type: ignore[assignment]
    with pytest.raises(flight.FlightTimedOutError):
        link.state()
    assert client.closed and link._client is None


def test_a_refusal_that_is_not_flight_s_stays_a_transfer_error() -> None:
    class Refusing(TimingOut):
        def call(self, kind: str, grant: Any, **body: Any) -> Any:
            raise TransferError("the host refuses it")

    link = FlightLink("grpc://127.0.0.1:1", "O.x.out@T", None, timeout=0.1)
    link._client = Refusing()  # type: ignore[assignment]
    with pytest.raises(TransferError):
        link.state()
