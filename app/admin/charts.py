"""Server-rendered inline SVG charts for the admin UI. Pure: numbers in, markup out.

No charting library and no client-side drawing: every chart is plain SVG that the browser shows
as it arrives, styled by classes in admin.css, so live fragments can replace a chart wholesale.
Every label is escaped; nothing here trusts a participant-chosen name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape


def _f(value: float) -> str:
    return f"{value:.1f}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2 or 5 times a power of ten apart)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    # The round step closest to the raw one (on a log scale), so the tick count stays near.
    step = min((m * power for m in (1, 2, 5, 10)), key=lambda c: abs(math.log(c / raw)))
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    return ticks


def _tick_label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:.0f}"
    return f"{value:.3g}"


def load_bar(load: float | None, threshold: float, capacity: float) -> Markup:
    """A horizontal bar: load against capacity, with a tick at the capacity threshold."""
    width, height = 180.0, 16.0
    top = max(capacity, threshold, load or 0.0) or 1.0
    fill = 0.0 if load is None else min(load, top) / top * width
    mark = min(threshold, top) / top * width
    state = "none" if load is None else ("over" if load > threshold * 1.01 else "under")
    title = (
        "no load reported yet"
        if load is None
        else f"load {load:.1f} / threshold {threshold:.1f} / capacity {capacity:.1f}"
    )
    return Markup(
        f'<svg class="bar" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>"
        f'<rect class="bar-bg" x="0" y="2" width="{width:.0f}" height="12" rx="3"/>'
        f'<rect class="bar-fill bar-{state}" x="0" y="2" width="{_f(fill)}" height="12" rx="3"/>'
        f'<line class="bar-threshold" x1="{_f(mark)}" x2="{_f(mark)}" y1="0" y2="{height:.0f}"/>'
        "</svg>"
    )


@dataclass(frozen=True)
class Series:
    label: str
    points: Sequence[tuple[float, float]]
    css: str = "s1"


@dataclass(frozen=True)
class Band:
    """A horizontal band (lo == hi draws a line), e.g. a contract's price range."""

    label: str
    lo: float
    hi: float
    css: str = "band"


@dataclass
class Chart:
    title: str
    series: list[Series]
    x_label: str = ""
    y_label: str = ""
    bands: list[Band] = field(default_factory=list)
    x_marker: tuple[float, str] | None = None
    x_format: Callable[[float], str] = _tick_label
    y_min: float | None = 0.0
    width: int = 640
    height: int = 260


def line_chart(chart: Chart) -> Markup:
    left, right, top, bottom = 56.0, 24.0, 44.0, 40.0
    w, h = float(chart.width), float(chart.height)
    pw, ph = w - left - right, h - top - bottom
    xs = [x for s in chart.series for x, y in s.points if math.isfinite(y)]
    ys = [y for s in chart.series for _, y in s.points if math.isfinite(y)]
    ys += [v for b in chart.bands for v in (b.lo, b.hi)]
    parts = [
        f'<svg class="chart" width="{w:.0f}" height="{h:.0f}" viewBox="0 0 {w:.0f} {h:.0f}" '
        f'role="img" aria-label="{escape(chart.title)}">',
        f'<text class="chart-title" x="{left:.0f}" y="16">{escape(chart.title)}</text>',
    ]
    if not xs:
        parts.append(
            f'<text class="chart-empty" x="{w / 2:.0f}" y="{h / 2:.0f}" text-anchor="middle">'
            "no data yet</text></svg>"
        )
        return Markup("".join(parts))
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    y0 = chart.y_min if chart.y_min is not None else min(ys)
    y1 = max(ys) if ys else 1.0
    if y1 <= y0:
        y1 = y0 + 1
    y1 += (y1 - y0) * 0.08

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - (min(max(y, y0), y1) - y0) / (y1 - y0) * ph

    for tick in nice_ticks(y0, y1):
        parts.append(
            f'<line class="grid" x1="{left:.0f}" x2="{left + pw:.0f}" '
            f'y1="{_f(py(tick))}" y2="{_f(py(tick))}"/>'
            f'<text class="tick" x="{left - 6:.0f}" y="{_f(py(tick) + 4)}" '
            f'text-anchor="end">{escape(_tick_label(tick))}</text>'
        )
    shown: set[str] = set()
    for tick in nice_ticks(x0, x1, 6):
        label = chart.x_format(tick)
        if label in shown:
            continue
        shown.add(label)
        parts.append(
            f'<text class="tick" x="{_f(px(tick))}" y="{top + ph + 16:.0f}" '
            f'text-anchor="middle">{escape(label)}</text>'
        )
    for band in chart.bands:
        y_hi, y_lo = py(band.hi), py(band.lo)
        parts.append(
            f'<rect class="{escape(band.css)}" x="{left:.0f}" y="{_f(y_hi)}" width="{pw:.0f}" '
            f'height="{_f(max(y_lo - y_hi, 1.5))}"><title>{escape(band.label)}</title></rect>'
            f'<text class="band-label" x="{left + 4:.0f}" y="{_f(y_hi - 4)}">'
            f"{escape(band.label)}</text>"
        )
    if chart.x_marker is not None:
        mx, label = chart.x_marker
        if x0 <= mx <= x1:
            near_right = px(mx) > left + pw * 0.75
            parts.append(
                f'<line class="marker" x1="{_f(px(mx))}" x2="{_f(px(mx))}" y1="{top:.0f}" '
                f'y2="{top + ph:.0f}"/><text class="marker-label" '
                f'x="{_f(px(mx) - 4 if near_right else px(mx) + 4)}" y="{top + 12:.0f}" '
                f'text-anchor="{"end" if near_right else "start"}">{escape(label)}</text>'
            )
    legend_x = left
    for s in chart.series:
        finite = [(x, y) for x, y in s.points if math.isfinite(y)]
        if finite:
            path = " ".join(f"{_f(px(x))},{_f(py(y))}" for x, y in finite)
            parts.append(f'<polyline class="line {escape(s.css)}" points="{path}"/>')
            if len(finite) == 1:
                x, y = finite[0]
                parts.append(
                    f'<circle class="dot {escape(s.css)}" cx="{_f(px(x))}" cy="{_f(py(y))}" r="3"/>'
                )
        parts.append(
            f'<rect class="swatch {escape(s.css)}" x="{legend_x:.0f}" y="26" width="12" '
            f'height="4"/><text class="legend" x="{legend_x + 16:.0f}" y="32">'
            f"{escape(s.label)}</text>"
        )
        legend_x += 24 + 7 * len(s.label)
    parts.append(
        f'<line class="axis" x1="{left:.0f}" x2="{left:.0f}" y1="{top:.0f}" y2="{top + ph:.0f}"/>'
        f'<line class="axis" x1="{left:.0f}" x2="{left + pw:.0f}" y1="{top + ph:.0f}" '
        f'y2="{top + ph:.0f}"/>'
        f'<text class="axis-label" x="{left + pw / 2:.0f}" y="{h - 6:.0f}" '
        f'text-anchor="middle">{escape(chart.x_label)}</text>'
        f'<text class="axis-label" x="14" y="{top + ph / 2:.0f}" text-anchor="middle" '
        f'transform="rotate(-90 14 {top + ph / 2:.0f})">{escape(chart.y_label)}</text>'
        "</svg>"
    )
    return Markup("".join(parts))


@dataclass(frozen=True)
class GraphEdge:
    a: str
    b: str
    label: str
    css: str
    href: str


def contract_graph(
    nodes: Sequence[str], edges: Sequence[GraphEdge], href: Callable[[str], str]
) -> Markup:
    """Participants on a circle, contracts as labelled edges between them."""
    size = 460.0
    centre, radius = size / 2, size / 2 - 60
    n = max(len(nodes), 1)
    pos = {
        name: (
            centre + radius * math.cos(2 * math.pi * i / n - math.pi / 2),
            centre + radius * math.sin(2 * math.pi * i / n - math.pi / 2),
        )
        for i, name in enumerate(nodes)
    }
    parts = [
        f'<svg class="graph" width="{size:.0f}" height="{size:.0f}" '
        f'viewBox="0 0 {size:.0f} {size:.0f}" role="img" aria-label="contract graph">'
    ]
    # Two contracts between one pair (an ended one and a live one) must not overprint.
    seen: dict[frozenset[str], int] = {}
    for edge in edges:
        if edge.a not in pos or edge.b not in pos:
            continue
        (xa, ya), (xb, yb) = pos[edge.a], pos[edge.b]
        pair = frozenset((edge.a, edge.b))
        k = seen.get(pair, 0)
        seen[pair] = k + 1
        mx, my = (xa + xb) / 2, (ya + yb) / 2
        # Offset the label along the edge's normal for each further edge of the same pair.
        length = math.hypot(xb - xa, yb - ya) or 1.0
        nx, ny = -(yb - ya) / length, (xb - xa) / length
        lx, ly = mx + nx * 18 * k, my + ny * 18 * k
        label = escape(edge.label)
        parts.append(
            f'<a href="{escape(edge.href)}" class="edge {escape(edge.css)}">'
            f'<line x1="{_f(xa)}" y1="{_f(ya)}" x2="{_f(xb)}" y2="{_f(yb)}"/>'
            f'<rect class="edge-label-bg" x="{_f(lx - 4 - 3.3 * len(edge.label))}" '
            f'y="{_f(ly - 10)}" width="{_f(8 + 6.6 * len(edge.label))}" height="16" rx="3"/>'
            f'<text class="edge-label" x="{_f(lx)}" y="{_f(ly + 2)}" text-anchor="middle">'
            f"{label}</text></a>"
        )
    for name, (x, y) in pos.items():
        parts.append(
            f'<a href="{escape(href(name))}" class="node">'
            f'<circle cx="{_f(x)}" cy="{_f(y)}" r="26"/>'
            f'<text x="{_f(x)}" y="{_f(y + 5)}" text-anchor="middle">{escape(name)}</text></a>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))


@dataclass(frozen=True)
class TimelineMark:
    at: float
    lane: str
    label: str
    css: str
    href: str


@dataclass(frozen=True)
class TimelineSpan:
    """A stretch of one lane between two instants (e.g. from a failure to its failover)."""

    start: float
    end: float
    lane: str
    label: str
    css: str


def timeline(
    marks: Sequence[TimelineMark],
    lanes: Sequence[str],
    fmt: Callable[[float], str],
    *,
    spans: Sequence[TimelineSpan] = (),
    label: str = "movement timeline",
) -> Markup:
    """One row per lane (movement reason), one dot per event at its time; spans as bars."""
    width, lane_h, left, right, top = 900.0, 26.0, 120.0, 20.0, 10.0
    height = top + lane_h * len(lanes) + 30
    parts = [
        f'<svg class="timeline" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(label)}">'
    ]
    times = [m.at for m in marks] + [t for s in spans for t in (s.start, s.end)]
    t0, t1 = (min(times), max(times)) if times else (0.0, 1.0)
    if t1 <= t0:
        t0, t1 = t0 - 1, t1 + 1
    pad = (t1 - t0) * 0.03
    t0, t1 = t0 - pad, t1 + pad
    pw = width - left - right

    def px(t: float) -> float:
        return left + (t - t0) / (t1 - t0) * pw

    for i, lane in enumerate(lanes):
        y = top + lane_h * i + lane_h / 2
        parts.append(
            f'<line class="lane" x1="{left:.0f}" x2="{width - right:.0f}" y1="{_f(y)}" '
            f'y2="{_f(y)}"/><text class="tick" x="{left - 8:.0f}" y="{_f(y + 4)}" '
            f'text-anchor="end">{escape(lane)}</text>'
        )
    lane_y = {lane: top + lane_h * i + lane_h / 2 for i, lane in enumerate(lanes)}
    for span in spans:
        span_at = lane_y.get(span.lane)
        if span_at is None:
            continue
        x0, x1 = px(span.start), px(max(span.end, span.start))
        parts.append(
            f'<rect class="span {escape(span.css)}" x="{_f(x0)}" y="{_f(span_at - 4)}" '
            f'width="{_f(max(x1 - x0, 2.0))}" height="8"><title>{escape(span.label)}</title></rect>'
        )
    for m in marks:
        lane_at = lane_y.get(m.lane)
        if lane_at is None:
            continue
        parts.append(
            f'<a href="{escape(m.href)}"><circle class="mark {escape(m.css)}" '
            f'cx="{_f(px(m.at))}" cy="{_f(lane_at)}" r="5">'
            f"<title>{escape(m.label)}</title></circle></a>"
        )
    if times:
        for tick in nice_ticks(t0, t1, 7):
            parts.append(
                f'<text class="tick" x="{_f(px(tick))}" y="{height - 8:.0f}" '
                f'text-anchor="middle">{escape(fmt(tick))}</text>'
            )
    parts.append("</svg>")
    return Markup("".join(parts))


def count_bars(items: Sequence[tuple[str, int]], *, label: str) -> Markup:
    """One horizontal bar per name with its count written beside it (e.g. replicas hosted per
    participant), on a scale shared by all bars so their lengths compare."""
    width, bar_h, left, right, top = 520.0, 22.0, 120.0, 40.0, 6.0
    height = top * 2 + bar_h * max(len(items), 1)
    most = max((n for _, n in items), default=0) or 1
    pw = width - left - right
    parts = [
        f'<svg class="count-bars" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>"
    ]
    for i, (name, n) in enumerate(items):
        y = top + bar_h * i
        w = n / most * pw
        parts.append(
            f'<g class="count-bar" data-name="{escape(name)}" data-count="{n}">'
            f'<text class="tick" x="{left - 8:.0f}" y="{_f(y + bar_h * 0.68)}" '
            f'text-anchor="end">{escape(name)}</text>'
            f'<rect class="bar-fill bar-under" x="{left:.0f}" y="{_f(y + 3)}" width="{_f(w)}" '
            f'height="{_f(bar_h - 6)}" rx="3"><title>{escape(name)}: {n}</title></rect>'
            f'<text class="tick" x="{_f(left + w + 6)}" y="{_f(y + bar_h * 0.68)}">{n}</text>'
            "</g>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
