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
 p.verdict { font-size: 1.15rem; font-weight: 600; }
</style></head><body>
<h1>What-if: {{ title }}</h1>
<p>{{ description }}</p>
<p>Source: <code>{{ source }}</code> &middot; kind: {{ kind }}</p>
<h2>Verdict</h2>
<p class="verdict {{ verdict_class }}">{{ verdict }}</p>
{% if reasons %}<h3>Why not acceptable</h3>
<ul class="reasons">{% for r in reasons %}<li>{{ r }}</li>{% endfor %}</ul>{% endif %}
{% if notes %}<h3>Notes</h3>
<ul class="notes">{% for key, note in notes %}<li><b>{{ key }}</b>: {{ note }}</li>{% endfor %}</ul>
{% endif %}
{% if story %}<h2>What happened</h2>
{% for act in story %}<h3>{{ act.title }}</h3>
<ul>{% for line in act.sentences %}<li>{{ line }}</li>{% endfor %}</ul>
{% endfor %}{% endif %}
{% if claims %}<h2>Against the story of <code>make demo</code></h2>
<table><tr><th>act</th><th class="text">make demo (README)</th>
<th class="text">this what-if</th></tr>
{% for c in claims %}<tr><td>{{ c.act }}</td><td class="text">{{ c.claim }}</td>
<td class="text {{ 'good' if c.holds else 'bad' }}">{{ c.detail }}</td></tr>
{% endfor %}</table>
<p>{{ claims_note }}</p>{% endif %}
<h2>Summary</h2>
<table>
{% for key, value in figures %}<tr><th class="text">{{ key }}</th><td>{{ value }}</td></tr>
{% endfor %}</table>
{% for table_title, head, rows in tables %}<h2>{{ table_title }}</h2>
<table><tr>{% for h in head %}<th>{{ h }}</th>{% endfor %}</tr>
{% for row in rows %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table>{% endfor %}
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
        return f"{value:.6g}" if math.isfinite(value) else "-"
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
    verdict: str,
    acceptable: bool | None,
    figures: Mapping[str, Any],
    plots: Sequence[Path],
    reasons: Sequence[str] = (),
    notes: Sequence[tuple[str, str]] = (),
    story: Sequence[Any] = (),
    claims: Sequence[Any] = (),
    claims_note: str = "",
    tables: Sequence[tuple[str, pd.DataFrame]] = (),
) -> Path:
    """The page, in the order a planner asks: the verdict and why not, notes on infinite costs,
    what happened act by act (and, for the demo federation, against ``make demo``'s story), the
    figures with the lower bound, tables, then every plot. ``acceptable`` colours the verdict
    (None: a fraction, neither good nor bad)."""
    shown = [
        (k, _show(v))
        for k, v in figures.items()
        if not isinstance(v, Mapping) and k not in ("verdict", "why_not_acceptable")
    ]
    rendered = []
    for table_title, table in tables:
        if table is None or table.empty:
            continue
        head = [str(c) for c in table.columns]
        rows = [[_show(v) for v in record] for record in table.itertuples(index=False)]
        rendered.append((table_title, head, rows))
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    html = env.from_string(_PAGE).render(
        title=title,
        description=description,
        source=source,
        kind=kind,
        verdict=verdict,
        verdict_class="" if acceptable is None else ("good" if acceptable else "bad"),
        reasons=list(reasons),
        notes=list(notes),
        story=list(story),
        claims=list(claims),
        claims_note=claims_note,
        figures=shown,
        tables=rendered,
        plots=[
            (p.stem.replace("_", " "), base64.b64encode(p.read_bytes()).decode()) for p in plots
        ],
    )
    path = directory / "report.html"
    path.write_text(html)
    return path
