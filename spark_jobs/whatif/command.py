"""``fedload whatif``: placeholder until the what-if job lands (issue 3)."""

from __future__ import annotations

from pathlib import Path

import typer


def whatif(
    target: Path = typer.Argument(..., help="A federation file, or a sweep file."),
    out: Path = typer.Option(..., "--out", help="Directory for summary.json, plots and report."),
) -> None:
    """Simulate a federation (or a sweep of generated ones) and write a report."""
    typer.echo("fedload whatif is not built yet", err=True)
    raise typer.Exit(2)
