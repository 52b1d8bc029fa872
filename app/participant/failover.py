"""Who fails a task over, and how: the pure decisions of an agent's crash recovery.

The registry's view decides that a host failed (its liveness rule; the agent never applies a
rule of its own), and the participant holding the task's replica takes it over: the registry
accepts a failover from nobody else. How it restarts is the recovery type of the contract under
which it holds the replica (the contract's availability terms, ``recovery``), DESIGN.md's three:

- ``gap``: empty state at the new host, reading from the producers' newest input (rounded up to
  a window start, so no window is computed from half its input); tuples in between are lost.
- ``rollback``: empty state, replaying the producers' output logs (upstream backup) from a
  window start the holder kept them from: nothing lost, windows already out come again.
- ``precise``: the last checkpoint shipped to the holder (passive standby), replayed from its
  offsets; the output is the failure-free run's.

A contract without a recovery term gets the one the replica's technique gives (a standby:
precise, upstream backup: rollback). Precise without a shipped checkpoint falls back to rollback
(the producers' logs are kept for the standby's offsets too), and says so.

Nothing here touches Spark, the network or a clock: ``spark_jobs.runtime.failover`` acts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

Recovery = Literal["gap", "rollback", "precise"]
RECOVERIES: tuple[Recovery, ...] = ("gap", "rollback", "precise")
# What a replica's technique gives when the contract names no recovery type.
BY_TECHNIQUE: Mapping[str, Recovery] = {
    "passive_standby": "precise",
    "active_standby": "precise",
    "upstream_backup": "rollback",
}


@dataclass(frozen=True)
class Failover:
    """One takeover to perform: ``taker`` (this participant) becomes ``task``'s host."""

    task: str
    failed_host: str
    taker: str
    recovery: Recovery
    technique: str
    max_delay_seconds: float | None = None


@dataclass(frozen=True)
class Keep:
    """What the holder of a replica keeps so that it can recover by its contract's type."""

    task: str
    recovery: Recovery
    technique: str
    # The contract's maximum incremental delay X (an active replica's delay budget); None: unset.
    max_delay_seconds: float | None = None


def recovery_of(terms: Mapping[str, Any] | None, technique: str) -> Recovery:
    """The contract's recovery type, else the one the replica's technique gives."""
    named = (terms or {}).get("recovery")
    if named is not None:
        if named not in RECOVERIES:
            raise ValueError(f"unknown recovery type {named!r} in the contract's availability")
        return cast(Recovery, named)
    try:
        return BY_TECHNIQUE[technique]
    except KeyError:
        raise ValueError(f"unknown replica technique {technique!r}") from None


def _contracts_by_id(contracts: Iterable[Mapping[str, Any]]) -> dict[int, Mapping[str, Any]]:
    return {int(c["id"]): c for c in contracts}


def kept(
    me: str, replicas: Iterable[Mapping[str, Any]], contracts: Iterable[Mapping[str, Any]]
) -> list[Keep]:
    """The replicas ``me`` holds, each with the recovery type it must be ready for."""
    by_id = _contracts_by_id(contracts)
    out = []
    for r in replicas:
        if r["host"] != me:
            continue
        contract = by_id.get(int(r["contract_id"])) if r.get("contract_id") is not None else None
        terms = (contract or {}).get("availability")
        delay = (terms or {}).get("max_delay_seconds")
        out.append(
            Keep(
                str(r["task"]),
                recovery_of(terms, str(r["technique"])),
                r["technique"],
                None if delay is None else float(delay),
            )
        )
    return out


def plan_failovers(
    me: str,
    tasks: Iterable[Mapping[str, Any]],
    replicas: Iterable[Mapping[str, Any]],
    contracts: Iterable[Mapping[str, Any]],
    liveness: Mapping[str, str],
) -> list[Failover]:
    """The takeovers ``me`` starts now: every task whose replica it holds and whose host the
    registry sees failed (only "failed": a suspect host may be a slow one).

    Active replicas first: their takeover is a registry round trip (the copy already runs),
    a restart takes seconds, and the agent performs them one after the other."""
    by_task = {str(t["name"]): t for t in tasks}
    by_id = _contracts_by_id(contracts)
    out = []
    for r in replicas:
        task = by_task.get(str(r["task"]))
        if r["host"] != me or task is None:
            continue
        host = str(task["host"])
        if host == me or liveness.get(host) != "failed":
            continue
        contract = by_id.get(int(r["contract_id"])) if r.get("contract_id") is not None else None
        terms = (contract or {}).get("availability") or {}
        out.append(
            Failover(
                task=str(task["name"]),
                failed_host=host,
                taker=me,
                recovery=recovery_of(terms, str(r["technique"])),
                technique=str(r["technique"]),
                max_delay_seconds=terms.get("max_delay_seconds"),
            )
        )
    return sorted(out, key=lambda f: (f.technique != "active_standby", f.task))


def effective(recovery: Recovery, *, holds_checkpoint: bool) -> Recovery:
    """Precise needs the standby's checkpoint; without one it degrades to rollback."""
    if recovery == "precise" and not holds_checkpoint:
        return "rollback"
    return recovery


def align_down(bucket: int, span: int) -> int:
    return (bucket // span) * span


def align_up(bucket: int, span: int) -> int:
    return -(-bucket // span) * span


def backup_point(fragment_ack: int, output_boundary: int | None, span: int) -> int | None:
    """Where the holder of a rollback replica keeps the producers' logs from (None: keep all).

    A window the failed host had not emitted yet ends after its output's boundary (the bucket
    of its watermark), so it starts less than a window before it: replaying from the window
    start one window before the boundary recomputes every such window whole. The fragment's
    acknowledgement is no guide alone: Spark's watermark lags a batch, and a batch may read
    many buckets, so the state may hold windows far below what it acknowledged (53 rows lost
    under load when the point followed the acknowledgement)."""
    if output_boundary is None:
        return None
    return max(0, align_down(min(fragment_ack, output_boundary) - span, span))


def replay_from(
    recovery: Recovery, *, newest: int | None, kept_from: int | None, span: int
) -> int | None:
    """Where an empty-state restart reads its input from (None: from the checkpoint's offsets).

    ``newest``: the producers' newest complete bucket; ``kept_from``: the bucket the upstream
    backup was kept from; ``span``: the fragment's window, in buckets."""
    if recovery == "precise":
        return None
    if recovery == "gap":
        if newest is None:
            raise ValueError("a gap restart needs the producers' newest bucket")
        return align_up(newest, span)
    if kept_from is None:
        raise ValueError("a rollback needs the bucket the upstream backup was kept from")
    return align_down(kept_from, span)


def window_span(params: Mapping[str, Any], defaults: Mapping[str, Any], bucket_s: float) -> int:
    """A fragment's window in buckets (1 for a fragment without one)."""
    seconds = params.get("window_seconds", defaults.get("window_seconds"))
    if seconds is None:
        return 1
    return max(1, math.ceil(float(seconds) / bucket_s))


class Availability(Protocol):
    """The agent's data plane for crash recovery (``spark_jobs.runtime.failover``)."""

    def keep(self, tasks: list[dict[str, Any]], keeps: list[Keep], replicas: list[dict]) -> None:
        """One tick's upkeep: ship standbys of what runs here, keep upstream backups held."""
        ...

    def fail_over(self, failover: Failover) -> None:
        """Take the task over through the registry's movement path (or leave it, logged)."""
        ...
