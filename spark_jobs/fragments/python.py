"""Python fragments: functions from installed distributions, found through entry points.

A distribution offers fragments as entry points of the group ``fedload.fragments`` (fedload's
own network-monitoring functions are entries of the ``fedload`` distribution, and the catalogue
resolves its names through them). A task may also name any function directly,
``python: "package.module:function"`` with ``distribution: NAME`` and the version it was
registered with: the hosting agent runs it only if its operator allows NAME
(``fedload agent --fragments``), an installed distribution NAME provides that module, and its
version is the registered one (another version may compute something else, and replicas and
moves rely on every host computing the same).

Calling convention: the function gets one DataFrame per input, positionally in the order of the
task's inputs (one input: one DataFrame), each with that input's columns only (a source's
without ``stime``, as a SQL fragment sees it), and the task's ``params`` as keyword arguments;
it returns a streaming DataFrame. The output gets ``stime`` by the SQL fragments' rule
(``sql.stime_rule``).
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as metadata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame

from app.work.distributions import (
    OWN_DISTRIBUTION,
    allowed_distributions,
    canonical,
    is_allowed,
)
from spark_jobs.fragments.sql import FragmentInput, input_frames, with_stime

GROUP = "fedload.fragments"


class FragmentRefused(PermissionError):
    """This agent's operator does not allow the fragment's distribution."""


class FragmentUnavailable(LookupError):
    """The fragment's distribution, module or function is not here as the task registered it."""


@functools.cache
def entry_points(distribution: str = OWN_DISTRIBUTION) -> dict[str, metadata.EntryPoint]:
    """The ``fedload.fragments`` entry points ``distribution`` declares, by name.

    From every copy of its metadata on the path, not the first only (``metadata.entry_points``
    keeps one per name): a checkout's ``fedload.egg-info``, left by a build in the source tree
    and found first when Python runs from the checkout, may predate the entries. Read once per
    process: an agent builds a spec per hosted fragment every tick, and what is installed does
    not change under a running agent."""
    wanted = canonical(distribution)
    found: dict[str, metadata.EntryPoint] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata is not None else None
        if name is None or canonical(name) != wanted:
            continue
        for ep in dist.entry_points.select(group=GROUP):
            found.setdefault(ep.name, ep)
    return found


def _installed(distribution: str) -> metadata.Distribution:
    try:
        return metadata.distribution(distribution)
    except metadata.PackageNotFoundError as error:
        raise FragmentUnavailable(f"distribution {distribution!r} is not installed here") from error


def _provides(dist: metadata.Distribution, top: str) -> bool:
    """Whether ``dist`` installs the top-level module ``top``: its ``top_level.txt``, else the
    files its RECORD lists (what ``metadata.packages_distributions`` reads, for one
    distribution rather than every one on the path)."""
    listed = dist.read_text("top_level.txt")
    if listed is not None:
        return top in listed.split()
    return any(
        f.parts and (f.parts[0] == top or f.parts[0] == f"{top}.py") for f in dist.files or ()
    )


def load_function(
    reference: str, distribution: str, version: str | None = None
) -> Callable[..., DataFrame]:
    """``package.module:function`` from ``distribution`` (at ``version`` when given)."""
    module_name, sep, attribute = reference.partition(":")
    if not sep or not module_name or not attribute:
        raise FragmentUnavailable(f"{reference!r} is not 'package.module:function'")
    found = _installed(distribution)
    if version is not None and found.version != version:
        raise FragmentUnavailable(
            f"the task was registered with {distribution} {version}, this agent has "
            f"{found.version}: another version may compute other rows than its other hosts"
        )
    if not _provides(found, module_name.split(".", 1)[0]):
        raise FragmentUnavailable(
            f"distribution {distribution!r} does not provide module {module_name!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise FragmentUnavailable(f"{module_name}: {error}") from error
    function = getattr(module, attribute, None)
    if not callable(function):
        raise FragmentUnavailable(f"{module_name} has no function {attribute!r}")
    return function


def python_fragment(
    function: Callable[..., DataFrame],
    inputs: Sequence[FragmentInput],
    watermark: str | None,
    params: Mapping[str, Any],
) -> Callable[[DataFrame], DataFrame]:
    """The function of SUnion's DataFrame (``sql.merged_schema(inputs)``) that calls
    ``function`` with one DataFrame per input and ``params``."""
    bound = functools.partial(function, **dict(params))

    def build(merged: DataFrame) -> DataFrame:
        output = bound(*input_frames(merged, inputs, watermark))
        return with_stime(output, [i.event_time for i in inputs])

    return build


__all__ = [
    "GROUP",
    "OWN_DISTRIBUTION",
    "FragmentRefused",
    "FragmentUnavailable",
    "allowed_distributions",
    "canonical",
    "entry_points",
    "is_allowed",
    "load_function",
    "python_fragment",
]
