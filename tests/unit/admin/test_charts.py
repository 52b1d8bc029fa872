"""The inline SVG charts: geometry from the numbers given, every label escaped."""

from __future__ import annotations

import re

from app.admin.charts import (
    Band,
    Chart,
    GraphEdge,
    Series,
    contract_graph,
    line_chart,
    load_bar,
    nice_ticks,
)


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    assert nice_ticks(0, 100) == [0, 20, 40, 60, 80, 100]
    assert nice_ticks(0, 0.26, 5) == [0, 0.05, 0.1, 0.15, 0.2, 0.25]
    assert nice_ticks(5, 5) == [5]


def test_load_bar_fills_in_proportion_and_marks_the_threshold() -> None:
    svg = str(load_bar(50, 80, 100))
    assert 'class="bar-fill bar-under" x="0" y="2" width="90.0"' in svg
    assert 'x1="144.0" x2="144.0"' in svg  # 80 / 100 of 180 px
    assert "bar-over" in str(load_bar(90, 80, 100))
    assert "no load reported yet" in str(load_bar(None, 80, 100))


def test_line_chart_scales_points_and_draws_bands() -> None:
    svg = str(
        line_chart(
            Chart(
                title="t",
                series=[Series("mc", [(0, 0), (10, 1)])],
                bands=[Band("#1 B: 0.24-0.26", 0.24, 0.26)],
            )
        )
    )
    (points,) = re.findall(r'<polyline class="line s1" points="([^"]+)"', svg)
    (first, last) = points.split(" ")
    assert float(first.split(",")[0]) == 56.0  # left margin, x = 0
    assert float(last.split(",")[0]) == 640 - 24  # right edge, x = 10
    assert float(first.split(",")[1]) > float(last.split(",")[1])  # higher value, higher up
    assert svg.count('class="band"') == 1


def test_an_empty_chart_says_so() -> None:
    assert "no data yet" in str(line_chart(Chart(title="t", series=[Series("x", [])])))


def test_labels_are_escaped() -> None:
    evil = "<script>alert(1)</script>"
    svg = str(
        contract_graph(
            [evil, "B"], [GraphEdge(evil, "B", evil, "edge-active", "/x")], lambda n: f"/p/{n}"
        )
    )
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    chart = str(line_chart(Chart(title=evil, series=[Series(evil, [(0, 1)])])))
    assert "<script>" not in chart
