"""The admin pages' charts, built from read models (the drawing itself is in charts.py)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from markupsafe import Markup

from app.admin.availability import AvailabilityView
from app.admin.charts import (
    Band,
    Chart,
    GraphEdge,
    Series,
    TimelineMark,
    TimelineSpan,
    contract_graph,
    line_chart,
    timeline,
)
from app.admin.readmodels import ParticipantDetail
from app.admin.rendering import fmt_clock
from app.contracts.schemas import ContractRead
from app.models import ContractStatus, MovementReason
from app.movements.schemas import MovementRead

# Price ranges read best with a real en dash, as in print.
EN_DASH = "\u2013"


def load_chart(detail: ParticipantDetail) -> Markup:
    samples = detail.samples
    series = [Series("load", [(s.at.timestamp(), s.load) for s in samples], "s-load")]
    thresholds = [(s.at.timestamp(), s.threshold) for s in samples if s.threshold is not None]
    if thresholds:
        series.append(Series("threshold", thresholds, "s-threshold"))
    return line_chart(
        Chart(
            title=f"{detail.participant.name}: load over time",
            series=series,
            x_label="time (UTC)",
            y_label="load units",
            x_format=fmt_clock,
        )
    )


def mc_chart(detail: ParticipantDetail) -> Markup:
    points = [
        (s.at.timestamp(), s.marginal_cost) for s in detail.samples if s.marginal_cost is not None
    ]
    return line_chart(
        Chart(
            title=f"{detail.participant.name}: marginal cost over time",
            series=[Series("marginal cost", points, "s-mc")],
            x_label="time (UTC)",
            y_label="per unit load",
            x_format=fmt_clock,
        )
    )


def cost_curve(detail: ParticipantDetail) -> Markup:
    name = detail.participant.name
    # Contracts with the same range share one band, labelled with every partner on it.
    partners: dict[tuple[float, float], list[str]] = {}
    for c in detail.contracts:
        if c.status is ContractStatus.active:
            partner = c.partner if c.proposer == name else c.proposer
            partners.setdefault((c.price_min, c.price_max), []).append(f"#{c.id} {partner}")
    bands = [
        Band(f"{', '.join(who)}: {lo:g}{EN_DASH}{hi:g}", lo, hi)
        for (lo, hi), who in sorted(partners.items())
    ]
    load = detail.row.load
    return line_chart(
        Chart(
            title=f"{name}: marginal cost curve with contract prices",
            series=[
                Series(
                    "marginal cost MC(load)",
                    [(p.load, p.marginal_cost) for p in detail.curve],
                    "s-mc",
                )
            ],
            bands=bands,
            x_label="load units",
            y_label="per unit load",
            x_marker=(load, f"now {load:.1f}") if load is not None else None,
        )
    )


def _edge_css(status: ContractStatus) -> str:
    if status is ContractStatus.active:
        return "edge-active"
    if status in (ContractStatus.proposed, ContractStatus.countered):
        return "edge-negotiating"
    return "edge-ended"


def graph(root: str, names: Sequence[str], contracts: Sequence[ContractRead]) -> Markup:
    # Ended contracts would clutter the picture; they remain in the table below it.
    shown = [c for c in contracts if _edge_css(c.status) != "edge-ended"]
    edges = [
        GraphEdge(
            c.proposer,
            c.partner,
            f"{c.price_min:g}{EN_DASH}{c.price_max:g}"
            + ("" if c.status is ContractStatus.active else f" ({c.status.value})"),
            _edge_css(c.status),
            f"{root}/contracts/{c.id}",
        )
        for c in shown
    ]
    return contract_graph(names, edges, lambda n: f"{root}/participants/{n}")


LANES = [r.value for r in MovementReason]


def moves_timeline(root: str, moves: Sequence[MovementRead]) -> Markup:
    marks = [
        TimelineMark(
            at=(m.finished_at or m.prepared_at).timestamp(),
            lane=m.reason.value,
            label=f"#{m.id} {m.task}: {m.src} → {m.to} ({m.status.value})",
            css=f"mark-{m.status.value}",
            href=f"{root}/tasks/{m.task}",
        )
        for m in moves
    ]
    return timeline(marks, LANES, fmt_clock)


def availability_timeline(root: str, view: AvailabilityView) -> Markup:
    """One lane per participant that failed or took part in a failover: a red dot where the
    registry declared it failed, a bar from there to each failover of a task it hosted (the
    recovery), a blue dot at the failover's commit, a green dot where it rejoined."""
    marks: list[TimelineMark] = []
    spans: list[TimelineSpan] = []
    for f in view.failures:
        marks.append(
            TimelineMark(
                at=f.failed_at.timestamp(),
                lane=f.participant,
                label=f"{f.participant} declared failed at {fmt_clock(f.failed_at.timestamp())}",
                css="mark-failed",
                href=f"{root}/participants/{f.participant}",
            )
        )
        if f.rejoined_at is not None:
            spans.append(
                TimelineSpan(
                    f.failed_at.timestamp(),
                    f.rejoined_at.timestamp(),
                    f.participant,
                    f"{f.participant} fenced until it rejoined",
                    "span-down",
                )
            )
            marks.append(
                TimelineMark(
                    at=f.rejoined_at.timestamp(),
                    lane=f.participant,
                    label=f"{f.participant} rejoined at {fmt_clock(f.rejoined_at.timestamp())}",
                    css="mark-rejoined",
                    href=f"{root}/participants/{f.participant}",
                )
            )
    for m in view.failovers:
        took = m.recovery_seconds
        how = f" by {m.technique.replace('_', ' ')}" if m.technique else ""
        label = f"#{m.movement_id} {m.task}: {m.src} \u2192 {m.to}{how} ({m.status})" + (
            f", recovered {took:.2f} s after the failure" if took is not None else ""
        )
        if m.failed_at is not None and m.finished_at is not None:
            spans.append(
                TimelineSpan(
                    m.failed_at.timestamp(), m.finished_at.timestamp(), m.src, label, "span"
                )
            )
        marks.append(
            TimelineMark(
                at=m.at.timestamp(),
                lane=m.src,
                label=label,
                css="mark-failover",
                href=f"{root}/tasks/{m.task}",
            )
        )
    lanes = sorted({m.lane for m in marks})
    times = [m.at for m in marks]
    # A failover within seconds of its failure: ticks a second apart would all read the same.
    fmt = fmt_clock if not times or max(times) - min(times) >= 10 else _fmt_clock_ms
    return timeline(marks, lanes, fmt, spans=spans, label="failures and failovers")


def _fmt_clock_ms(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%H:%M:%S.%f")[:-3]
