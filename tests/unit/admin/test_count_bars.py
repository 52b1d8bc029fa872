"""The replicas-per-participant bar chart: bar lengths on one scale, counts and names escaped."""

from __future__ import annotations

import re

from app.admin.charts import count_bars


def _widths(svg: str) -> list[float]:
    return [
        float(w) for w in re.findall(r'<rect class="bar-fill bar-under"[^>]* width="([\d.]+)"', svg)
    ]


def test_bars_share_one_scale_and_carry_their_counts() -> None:
    svg = str(count_bars([("A", 0), ("D", 2), ("E", 1)], label="replicas per participant"))
    # 360 px of plot width (520 - 120 - 40): the largest count fills it, the others in proportion.
    assert _widths(svg) == [0.0, 360.0, 180.0]
    assert re.findall(r'data-name="([^"]+)" data-count="(\d+)"', svg) == [
        ("A", "0"),
        ("D", "2"),
        ("E", "1"),
    ]
    assert 'aria-label="replicas per participant"' in svg


def test_all_zero_and_hostile_names() -> None:
    svg = str(count_bars([("<b>x</b>", 0)], label="r"))
    assert _widths(svg) == [0.0]
    assert "<b>" not in svg and "&lt;b&gt;x&lt;/b&gt;" in svg
    assert 'height="34"' in str(count_bars([], label="none"))
