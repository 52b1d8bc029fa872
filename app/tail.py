"""``fedload tail TASK``: a task's output as JSON lines, a thin wrapper of ``app.results``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TextIO

import pyarrow.flight as flight
import typer

from app.participant.client import ApiError
from app.results import Results
from app.user_errors import UserError

API_ENV, KEY_ENV = "FEDLOAD_API", "FEDLOAD_API_KEY"


def print_rows(results: Results, task: str, out: TextIO, **how: bool) -> int:
    """Write each row as one line of JSON; the number of rows written."""
    written = 0
    for row in results.rows(task, **how):
        out.write(json.dumps(row, separators=(",", ":")) + "\n")
        out.flush()  # a pipe reader (jq, a test) sees each bucket as it closes
        written += 1
    return written


def tail(
    task: str = typer.Argument(..., help="The task whose output to print."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing as buckets close."),
    tentative: bool = typer.Option(
        False,
        "--tentative",
        help='Also tentative rows, UNDO and corrections, each line with its "kind".',
    ),
    from_start: bool = typer.Option(
        False,
        "--from-start",
        help="With --follow: first everything the log holds (default: only what closes now on).",
    ),
    api: str = typer.Option(
        "http://127.0.0.1:8000", "--api", envvar=API_ENV, help="The registry's URL."
    ),
    key: str = typer.Option("", "--key", envvar=KEY_ENV, help="Your participant's API key."),
    tls_ca: Path | None = typer.Option(
        None,
        "--tls-ca",
        envvar="FEDLOAD_TLS_CA",
        help="The authority of the agents' grpc+tls:// endpoints (PEM).",
    ),
) -> None:
    """Print TASK's output as JSON lines, one row per line (timestamps ISO-8601).

    Without --follow: the stable rows of every final bucket the log holds, then exit. The read
    token and the owner's endpoint come from the registry: no Flight token by hand."""
    if not key:
        raise typer.BadParameter(f"give --key or set {KEY_ENV}", param_hint="--key")
    roots = tls_ca.read_bytes() if tls_ca is not None else None
    with Results(api, key, tls_roots=roots) as results:
        # Ctrl-C ends a --follow: app.cli_errors ends it quietly (status 130).
        try:
            print_rows(
                results,
                task,
                sys.stdout,
                follow=follow,
                tentative=tentative,
                from_start=from_start or not follow,
            )
        except ApiError as error:
            raise UserError(
                f"the registry at {api} refused to read {task}'s output: {error.detail}",
                "check the task's name and that your key's participant takes part in it",
            ) from error
        except LookupError as error:
            raise UserError(str(error), "its agent reports one when it runs") from error
        except flight.FlightError as error:
            raise UserError(
                f"reading {task}'s output failed: {error}", "is the owner's agent running?"
            ) from error
