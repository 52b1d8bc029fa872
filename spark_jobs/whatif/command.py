"""``fedload whatif``: the capacity planner's what-if analysis."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console

if TYPE_CHECKING:
    from app.federation.document import FederationDoc
    from spark_jobs.whatif.large_input import LargeInput

console = Console(stderr=True)


def _fail(message: str, status: int = 2) -> typer.Exit:
    # Status 2: a user mistake, in one line (as app/cli_errors.py reports the others).
    console.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(status)


def whatif(
    target: Path | None = typer.Argument(
        None, help="A federation file (contracts/*.yaml) or a sweep file (contracts/sweeps/)."
    ),
    out: Path = typer.Option(..., "--out", help="Directory for summary.json, plots and report."),
    large: str | None = typer.Option(
        None,
        "--large",
        help="Simulate one very large federation in rounds on Spark: N generates one of N "
        "participants; a directory of Parquet tables or a federation file reads the planner's "
        "own (schema: spark_jobs/whatif/large_input.py).",
    ),
    k: int = typer.Option(10, "--k", help="--large: contracts per participant."),
    width: float = typer.Option(0.1, "--width", help="--large: relative price-range width."),
    skew: float = typer.Option(1.0, "--skew", help="--large: load skew (log-normal sigma)."),
    spread: float = typer.Option(0.3, "--spread", help="--large: capacity spread, in [0, 1)."),
    utilisation: float = typer.Option(
        0.7, "--utilisation", help="--large: total load / total of thresholds (< 1: underloaded)."
    ),
    seed: int = typer.Option(0, "--seed", help="--large: random seed."),
    max_rounds: int = typer.Option(200, "--max-rounds", help="--large: at most this many rounds."),
    max_steps: int | None = typer.Option(
        None, "--max-steps", min=1, help="Federation file: at most this many simulation steps."
    ),
    master: str | None = typer.Option(
        None,
        "--spark-master",
        "--master",
        help="Spark master (default: $SPARK_MASTER, else local[*]).",
    ),
    spark_conf: list[str] = typer.Option(
        [],
        "--spark-conf",
        help="KEY=VALUE Spark setting for the run, repeatable (e.g. spark.driver.memory=8g; "
        "the driver's default heap is 1 GB, whatever the federation's size).",
    ),
    in_process: bool = typer.Option(
        False, "--in-process", help="Run a sweep in this Python process instead of on Spark."
    ),
) -> None:
    """Simulate a federation, a sweep of generated ones, or one very large federation.

    One federation: fedload whatif contracts/borealis-demo.yaml --out var/reports/demo

    A sweep (contracts/sweeps/README.md): fedload whatif contracts/sweeps/k-vs-width.yaml
    --out var/reports/k-vs-width

    One very large federation on Spark: fedload whatif --large 100000 --k 10
    --out var/reports/large

    Writes DIR/summary.json (verdict, acceptable, why_not_acceptable, steps_to_acceptable,
    moves, payments_total, cost, cost_lower_bound, cost_ratio, final_load, thresholds; an
    infinite cost is null with cost_note saying who is at or past capacity), PNG plots and
    DIR/report.html (the verdict, why not, what happened act by act, the lower bound); a sweep
    writes the fraction of runs acceptable instead of a yes/no, and DIR/results.parquet, one
    row per simulation. A finished simulation exits 0 whatever its verdict; a file that cannot
    be used stops the run with a message naming the file, the line and the field, and exit
    status 1.
    """
    from app.federation.document import FederationFileError, load_federation
    from spark_jobs.whatif import job
    from spark_jobs.whatif.sweep_file import (
        GridSweep,
        LargeSweep,
        SweepFileError,
        is_sweep_document,
        load_sweep,
    )

    if (target is None) == (large is None):
        raise _fail("give either a FILE (federation or sweep) or --large N, not both")
    if large is not None and not large.strip().isdigit():
        _run_large_input(Path(large), out, master, spark_conf, max_rounds)
        return
    if large is not None:
        spec = LargeSweep(
            name=f"large-{large}",
            description="",
            participants=int(large),
            contracts_per_participant=k,
            price_range_width=width,
            load_skew=skew,
            capacity_spread=spread,
            utilisation=utilisation,
            seed=seed,
            max_rounds=max_rounds,
            source="--large",
        )
        _run_large(spec, out, master, spark_conf)
        return
    assert target is not None
    try:
        with target.open() as handle:
            data = yaml.safe_load(handle)
    except OSError as exc:
        raise _fail(f"{target}: (file): cannot read: {exc.strerror}") from exc
    except yaml.YAMLError:
        data = None  # the federation loader reports the syntax error with its line
    if is_sweep_document(data):
        try:
            sweep = load_sweep(target)
        except SweepFileError as exc:
            raise _fail(str(exc)) from exc
        if isinstance(sweep, LargeSweep):
            _run_large(sweep, out, master, spark_conf)
            return
        assert isinstance(sweep, GridSweep)
        summary = job.run_sweep(sweep, out, console=console, master=master, in_process=in_process)
        console.print(
            f"{summary['runs']} runs, {summary['fraction_acceptable']:.1%} reached an acceptable "
            f"allocation; report: {out / 'report.html'}"
            if summary["fraction_acceptable"] is not None
            else f"{summary['runs']} runs; report: {out / 'report.html'}"
        )
        if summary["errors"]:
            raise _fail(
                f"{summary['errors']} of {summary['runs']} simulations failed; see the 'error' "
                f"column of {out / 'results.parquet'}",
                status=1,
            )
        return
    try:
        doc = load_federation(target)
        check_finite(doc)
    except FederationFileError as exc:
        raise _fail(str(exc)) from exc
    try:
        summary = job.run_federation(doc, out, max_steps=max_steps, console=console)
    except ValueError as exc:  # the engine refusing a scenario the file checks let through
        raise _fail(f"{doc.source}: {exc}") from exc
    # First the verdict, on one line; then the figures and, when not acceptable, why not.
    verdict = str(summary["verdict"])
    if not summary["acceptable"]:
        verdict = "NOT" + verdict.removeprefix("not")
    console.print(f"{doc.name}: {verdict}", highlight=False, soft_wrap=True)
    ratio = summary.get("cost_ratio")
    console.print(
        f"  {summary['moves']} moves, cost {_figure(summary['cost'])} vs lower bound "
        f"{_figure(summary['cost_lower_bound'])}"
        + (f" ({ratio:.2f}x)" if isinstance(ratio, float) else "")
        + f"; report: {out / 'report.html'}",
        highlight=False,
        soft_wrap=True,
    )
    for key in ("cost_note", "cost_lower_bound_note"):
        if summary.get(key):
            what = "cost" if key == "cost_note" else "lower bound"
            console.print(f"  {what} {summary[key]}", highlight=False, soft_wrap=True)
    _why_not(summary)


def check_finite(doc: FederationDoc) -> None:
    """Refuse NaN and infinity where a simulation needs a number (YAML's ``.nan``/``.inf`` pass
    the JSON Schema's bounds): a task's load, a scale factor, a time, a price, a setting."""
    from app.federation.document import FederationFileError

    fields: list[tuple[str, float | None]] = []
    for i, p in enumerate(doc.participants):
        fields += [(f"participants[{i}].capacity", p.capacity)]
        fields += [(f"participants[{i}].joins_at", p.joins_at)]
    for i, c in enumerate(doc.contracts):
        fields += [(f"contracts[{i}].price_min", c.price_min)]
        fields += [(f"contracts[{i}].price_max", c.price_max)]
        fields += [(f"contracts[{i}].min_move_seconds", c.min_move_seconds)]
    for i, t in enumerate(doc.tasks):
        fields += [(f"tasks[{i}].load", t.load)]
    for i, e in enumerate(doc.timeline):
        fields += [(f"timeline[{i}].{key}", getattr(e, key)) for key in ("at", "factor", "load")]
    sim = doc.simulation
    for key in ("step_seconds", "offer_interval_seconds", "duration_seconds", "hysteresis"):
        fields += [(f"simulation.{key}", getattr(sim, key))]
    for where, value in fields:
        if value is not None and not math.isfinite(float(value)):
            raise FederationFileError(
                doc.source, None, where, f"must be a finite number, got {value}"
            )


def _figure(value: object) -> str:
    # summary.json writes an infinite cost (an M/M/1 participant at or past capacity) as null.
    return "infinite" if value is None else f"{value:.4g}"


def _why_not(summary: dict[str, object]) -> None:
    reasons = summary.get("why_not_acceptable") or []
    assert isinstance(reasons, list)
    for reason in reasons:
        console.print(f"  not acceptable: {reason}", highlight=False, soft_wrap=True)


_OPTIONS = {
    "participants": "--large",
    "contracts_per_participant": "--k",
    "price_range_width": "--width",
    "load_skew": "--skew",
    "capacity_spread": "--spread",
    "utilisation": "--utilisation",
}


def _run_large_input(
    path: Path, out: Path, master: str | None, spark_conf: list[str], max_rounds: int
) -> None:
    from spark_jobs.whatif.large_input import LargeInputError, load_large_input

    try:
        spec, inp = load_large_input(path, max_rounds=max_rounds)
    except LargeInputError as exc:
        raise _fail(str(exc)) from exc
    _run_large(spec, out, master, spark_conf, inp=inp)


def _run_large(
    spec: object,
    out: Path,
    master: str | None,
    spark_conf: list[str],
    inp: LargeInput | None = None,
) -> None:
    from app.market.rounds import LargeFederationError, generate_large
    from spark_jobs.whatif import job
    from spark_jobs.whatif.large_session import (
        SparkConfError,
        SparkRunError,
        parse_conf,
        spark_failures,
        whatif_session,
    )
    from spark_jobs.whatif.sweep_file import LargeSweep

    assert isinstance(spec, LargeSweep)
    try:
        conf = parse_conf(spark_conf)
    except SparkConfError as exc:
        raise _fail(f"command line: {exc}") from exc
    given: dict[str, Any] = {} if inp is None else {"fed": inp.fed, "names": inp.names}
    try:
        if inp is None:
            # Generated before Spark starts, so bad options are refused without a JVM.
            given["fed"] = generate_large(
                participants=spec.participants,
                contracts_per_participant=spec.contracts_per_participant,
                price_range_width=spec.price_range_width,
                load_skew=spec.load_skew,
                capacity_spread=spec.capacity_spread,
                utilisation=spec.utilisation,
                seed=spec.seed,
            )
        with (
            whatif_session(
                master,
                conf,
                app_name="fedload-whatif-large",
            ),
            spark_failures(),
        ):
            summary = job.run_large(spec, out, console=console, master=master, **given)
    except SparkRunError as exc:
        # A failed run, not a mistake in the command: status 1, as for failed simulations.
        raise _fail(f"{spec.source}: {exc}", status=1) from exc
    except LargeFederationError as exc:
        if spec.source == "--large":
            raise _fail(
                f"command line: {_OPTIONS.get(exc.field, exc.field)}: {exc.detail}"
            ) from exc
        raise _fail(f"{spec.source}: large.{exc.field}: {exc.detail}") from exc
    state = "acceptable" if summary["acceptable"] else "NOT acceptable"
    console.print(
        f"{spec.participants:,} participants: {state} after {summary['rounds']} rounds "
        f"(first acceptable: {summary['steps_to_acceptable']}); report: {out / 'report.html'}"
    )
    _why_not(summary)
