"""DIR/summary.json and DIR/report.html: one self-contained page (plots inlined, no CDN)."""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from jinja2 import Environment, select_autoescape

_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>fedload what-if: {{ title }}</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1000px; color: #222; }
 table { border-collapse: collapse; margin: 1rem 0; font-size: 0.9rem; }
 th, td { border: 1px solid #ccc; padding: 0.25rem 0.6rem; text-align: right; }
 th { background: #f3f3f3; } td.text, th.text { text-align: left; }
 img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0 1.5rem; }
 .bad { color: #a00; } .good { color: #070; } code { background: #f5f5f5; padding: 0 0.2rem; }
</style></head><body>
<h1>What-if: {{ title }}</h1>
<p>{{ description }}</p>
<p>Source: <code>{{ source }}</code> &middot; kind: {{ kind }}</p>
<h2>Summary</h2>
<table>
{% for key, value in figures %}<tr><th class="text">{{ key }}</th><td>{{ value }}</td></tr>
{% endfor %}</table>
{% if table_rows %}<h2>{{ table_title }}</h2>
<table><tr>{% for h in table_head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in table_rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table>{% endif %}
<h2>Plots</h2>
{% for name, data in plots %}<h3>{{ name }}</h3>
<img alt="{{ name }}" src="data:image/png;base64,{{ data }}">
{% endfor %}
</body></html>
"""


def _json_safe(value: Any) -> Any:
    """JSON has no infinity: an infinite cost (a participant past capacity) is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def write_summary(directory: Path, summary: Mapping[str, Any]) -> Path:
    path = directory / "summary.json"
    path.write_text(json.dumps(_json_safe(dict(summary)), indent=2, allow_nan=False) + "\n")
    return path


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}"
    if value is None:
        return "-"
    return str(value)


def write_report(
    directory: Path,
    *,
    title: str,
    description: str,
    source: str,
    kind: str,
    figures: Mapping[str, Any],
    plots: Sequence[Path],
    table: pd.DataFrame | None = None,
    table_title: str = "",
) -> Path:
    shown = [(k, _show(v)) for k, v in figures.items() if not isinstance(v, Mapping)]
    head: list[str] = []
    rows: list[list[str]] = []
    if table is not None and not table.empty:
        head = [str(c) for c in table.columns]
        rows = [[_show(v) for v in record] for record in table.itertuples(index=False)]
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    html = env.from_string(_PAGE).render(
        title=title,
        description=description,
        source=source,
        kind=kind,
        figures=shown,
        table_head=head,
        table_rows=rows,
        table_title=table_title,
        plots=[
            (p.stem.replace("_", " "), base64.b64encode(p.read_bytes()).decode()) for p in plots
        ],
    )
    path = directory / "report.html"
    path.write_text(html)
    return path
