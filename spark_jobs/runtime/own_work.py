"""A task's own work (``app.work.spec``: SQL or a Python function) as what a host runs, and
its analysis on Spark before anything starts.

``work_fragment`` turns a task record into the DataFrame function and the SUnion schema of its
``FragmentSpec``; ``analyse`` builds that function over a streaming DataFrame of the input
schema without starting a query (Spark resolves names and types, and the streaming checks of
an append-mode query run on its plan), so a query that cannot run is refused with Spark's own
message before a checkpoint exists. ``WorkHosting`` is the agent's side: which distributions
its operator allows, each task's analysis once per version of its work, reported to the
registry.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import weakref
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from app.participant.ports import TaskRecord
from app.work.distributions import FRAGMENTS_ENV, parse_list
from app.work.spec import Work, interval_seconds
from spark_jobs.fragments.python import (
    FragmentRefused,
    FragmentUnavailable,
    allowed_distributions,
    is_allowed,
    load_function,
    python_fragment,
)
from spark_jobs.fragments.sql import (
    STIME,
    FragmentAnalysisError,
    FragmentInput,
    local_name,
    merged_schema,
    sql_fragment,
)

log = logging.getLogger("fedload.agent.fragments")

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class WorkFragment:
    """What a ``FragmentSpec`` needs of a task's own work."""

    build: Callable[[DataFrame], DataFrame]
    input_schema: StructType
    kind: str  # "sql" or "python"


def fragment_inputs(task: TaskRecord) -> list[FragmentInput]:
    """The task's inputs as its code names them, with their streams' schemas."""
    schemas = (*task.input_schemas, *[None] * len(task.inputs))[: len(task.inputs)]
    times = (*task.input_event_times, *[None] * len(task.inputs))[: len(task.inputs)]
    out = []
    for name, schema, event_time in zip(task.inputs, schemas, times, strict=True):
        if not schema:
            raise FragmentAnalysisError(f"input {name} has no declared schema")
        out.append(FragmentInput(local_name(name), schema, event_time or STIME))
    return out


def work_fragment(task: TaskRecord, allowed: Collection[str]) -> WorkFragment:
    """The fragment of a SQL or Python task. Raises FragmentRefused for a distribution this
    agent does not allow, FragmentUnavailable when it is not here as registered, and
    FragmentAnalysisError for work that cannot be built."""
    work = Work.from_json(task.work)
    inputs = fragment_inputs(task)
    schema = merged_schema(inputs)
    if work.sql is not None:
        return WorkFragment(sql_fragment(work.sql, inputs, work.watermark), schema, "sql")
    if work.python is not None:
        distribution = work.distribution or ""
        if not is_allowed(distribution, allowed):
            raise FragmentRefused(
                f"{task.name} runs {work.python} from {distribution}, which this agent's "
                f"operator does not allow (fedload agent --fragments {distribution})"
            )
        function = load_function(work.python, distribution, work.distribution_version)
        build = python_fragment(function, inputs, work.watermark, task.params)
        return WorkFragment(build, schema, "python")
    raise FragmentAnalysisError(f"{task.name} runs neither SQL nor a Python function")


# How often a fragment runs a micro-batch unless its task says (``trigger:``).
DEFAULT_TRIGGER_SECONDS = 0.5


def trigger_seconds(work: Mapping[str, Any] | None) -> float:
    """The task's ``trigger`` in seconds, or the default (catalogue fragments have none)."""
    trigger = (work or {}).get("trigger")
    return DEFAULT_TRIGGER_SECONDS if not trigger else interval_seconds(str(trigger))


def empty_stream(spark: SparkSession, schema: StructType) -> DataFrame:
    """A streaming DataFrame of ``schema`` that no query ever reads: Spark's rate source,
    planned only, with its columns replaced (SUnion would need reachable logs to plan)."""
    rate = spark.readStream.format("rate").load()
    return rate.select(*(F.lit(None).cast(f.dataType).alias(f.name) for f in schema.fields))


def analyse(spark: SparkSession, fragment: WorkFragment) -> StructType:
    """The output schema of ``fragment`` over its input, or FragmentAnalysisError with Spark's
    message (an unknown column or function, a type error, an aggregation append mode cannot
    emit: ``UnsupportedOperationChecker``, what ``start()`` would say)."""
    try:
        output = fragment.build(empty_stream(spark, fragment.input_schema))
        schema = output.schema
        jvm: Any = spark._jvm
        checker = jvm.org.apache.spark.sql.catalyst.analysis.UnsupportedOperationChecker
        append = jvm.org.apache.spark.sql.streaming.OutputMode.Append()
        checker.checkForStreaming(output._jdf.queryExecution().analyzed(), append)
    except (FragmentAnalysisError, FragmentRefused, FragmentUnavailable):
        raise
    except Exception as error:  # Spark's AnalysisException, or the user's code failing
        raise FragmentAnalysisError(_message(error)) from error
    return schema


def _message(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    # Py4J appends the JVM's stack trace; the owner needs Spark's sentence, not the trace.
    return text.split("\n\tat ", 1)[0].split("\nJVM stacktrace:", 1)[0].strip()


def schema_ddl(schema: StructType) -> str:
    """``StructType`` -> the DDL the registry stores and parses (``app.work.spec.parse_ddl``)."""

    def quoted(name: str) -> str:
        return name if _IDENTIFIER.match(name) else f"`{name.replace('`', '``')}`"

    return ", ".join(f"{quoted(f.name)} {f.dataType.simpleString()}" for f in schema.fields)


def distributions_from_env() -> frozenset[str]:
    return allowed_distributions(parse_list(os.environ.get(FRAGMENTS_ENV)))


class AnalysisReports(Protocol):
    """The registry call that records a task's analysis (``FedloadClient.report_analysis``)."""

    def report_analysis(
        self, task: str, *, error: str | None, output_schema: str | None
    ) -> Any: ...


@dataclass
class _Analysed:
    key: str
    fragment: WorkFragment | None
    error: str | None


class WorkHosting:
    """One agent's SQL and Python fragments: built and analysed once per version of a task's
    work (a tick builds every hosted fragment's spec), refused when the operator does not allow
    the distribution, and each outcome reported to the registry once."""

    def __init__(
        self, client: object, allowed: Collection[str] | None = None, me: str | None = None
    ) -> None:
        """``me``: this participant; the registry takes a task's analysis from its owner only,
        so a partner hosting the task logs what it found (None: report every task)."""
        self.allowed = allowed_distributions(allowed) if allowed is not None else None
        self._client = client
        self._me = me
        self._lock = threading.Lock()
        self._done: dict[str, _Analysed] = {}

    @property
    def distributions(self) -> frozenset[str]:
        """What this agent allows: its operator's list (or FEDLOAD_FRAGMENTS), and fedload."""
        return self.allowed if self.allowed is not None else distributions_from_env()

    def fragment(self, task: TaskRecord, spark: SparkSession | None) -> WorkFragment | None:
        """The task's fragment, analysed on ``spark`` (None: not yet, Spark is not up; the
        caller starts nothing then). None when it is refused or does not analyse, after
        reporting why."""
        key = json.dumps([task.work, task.params, task.input_schemas, task.input_event_times])
        with self._lock:
            done = self._done.get(task.name)
            if done is not None and done.key == key:
                return done.fragment
        try:
            fragment = work_fragment(task, self.distributions)
            if spark is None:
                return fragment
            output = analyse(spark, fragment)
        except (FragmentAnalysisError, FragmentRefused, FragmentUnavailable) as error:
            log.warning("%s is not run here: %s", task.name, error)
            self._record(task, _Analysed(key, None, str(error)), None)
            return None
        self._record(task, _Analysed(key, fragment, None), schema_ddl(output))
        return fragment

    def error(self, task: str) -> str | None:
        done = self._done.get(task)
        return None if done is None else done.error

    def _record(self, task: TaskRecord, outcome: _Analysed, output_schema: str | None) -> None:
        with self._lock:
            self._done[task.name] = outcome
        report = getattr(self._client, "report_analysis", None)
        if report is None or (self._me is not None and task.owner != self._me):
            return  # not ours to report (or a registry without the call): the log says it
        try:
            report(task.name, error=outcome.error, output_schema=output_schema)
        except Exception as error:  # the registry away: reported again at the next change
            log.warning("%s: could not report its analysis: %s", task.name, error)


_HOSTINGS: weakref.WeakKeyDictionary[object, WorkHosting] = weakref.WeakKeyDictionary()


def hosting_of(host: object, client: object, me: str) -> WorkHosting:
    """The ``WorkHosting`` of participant ``me``'s host, made at its first SQL or Python task
    with the distributions FEDLOAD_FRAGMENTS allows (``fedload agent --fragments`` sets it)."""
    with _HOSTINGS_LOCK:
        hosting = _HOSTINGS.get(host)
        if hosting is None:
            hosting = _HOSTINGS[host] = WorkHosting(client, me=me)
        return hosting


_HOSTINGS_LOCK = threading.Lock()
