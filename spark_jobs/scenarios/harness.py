"""What every scenario driver through the product does around its own steps: wait for a
condition the processes reach in their own time, and run a federation of `fedload serve` and
`fedload agent` processes with its agents' logs shown when a step fails."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from rich.console import Console

from app.db.session import dispose_engines
from app.participant.client import FedloadClient
from spark_jobs.scenarios.processes import ProcessFederation

# The waits of the scenario running in this context, for its report: where its minutes went,
# and which wait ran out (a condition that can never hold costs its whole timeout, silently
# where the scenario goes on after a timeout: 2 x 180 s of the tentative test, session 28).
_waits: ContextVar[list[dict[str, Any]] | None] = ContextVar("scenario_waits", default=None)


@contextmanager
def recording_waits() -> Iterator[list[dict[str, Any]]]:
    """Record every ``wait_until`` of this context (this thread) until the block ends."""
    found: list[dict[str, Any]] = []
    token = _waits.set(found)
    try:
        yield found
    finally:
        _waits.reset(token)


def waits_so_far() -> list[dict[str, Any]]:
    """Each wait of the running scenario: what, how long, and its outcome (met, timed out or
    interrupted)."""
    return list(_waits.get() or [])


def wait_until(what: str, check: Callable[[], Any], timeout: float, every: float = 0.3) -> Any:
    """``check()``'s first truthy answer; an exception counts as "not yet" (an agent may still be
    starting, the service busy), and the last answer or error is in the timeout's message."""
    began = time.monotonic()
    outcome = "interrupted"
    last: Any = None
    try:
        while time.monotonic() < began + timeout:
            try:
                last = check()
            except Exception as error:
                last = error
            else:
                if last:
                    outcome = "met"
                    return last
            time.sleep(every)
        outcome = "timed out"
        raise TimeoutError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
    finally:
        found = _waits.get()
        if found is not None:
            seconds = round(time.monotonic() - began, 1)
            found.append({"what": what, "seconds": seconds, "outcome": outcome})


@contextmanager
def running(
    fed: ProcessFederation, console: Console, later: Collection[str] = ()
) -> Iterator[FedloadClient]:
    """Start the service and one agent per participant but those ``later`` names (the scenario
    starts them itself, with ``fed.start_agent``: the registry judges no participant it never
    heard from); yield the operator's client. When the scenario fails, each agent's last log
    lines are printed (where the cause usually is). Its waits are recorded (``waits_so_far``)."""
    with recording_waits(), fed:
        fed.start()
        for p in fed.doc.participants:
            if p.name not in later:
                fed.start_agent(p.name)
        console.print(f"agents: {', '.join(f'{n} (pid {a.pid})' for n, a in fed.agents.items())}")
        admin = fed.admin()
        try:
            yield admin
        except BaseException:
            for name, agent in fed.agents.items():
                # A log line is text, not Rich markup ("[/...]" in one would raise here).
                console.print(
                    f"--- {name}'s agent log ---\n{agent.tail(30)}", markup=False, highlight=False
                )
            raise
        finally:
            admin.close()
            dispose_engines(fed.registry_url)
