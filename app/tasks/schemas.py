from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from app.api_types import JsonObject, NameRef, NonNegative, ShortText
from app.limits import MAX_LIST_ITEMS
from app.participants.schemas import NAME_PATTERN

# A query, a schema or an error message: free text over several lines (no NUL, which no
# backend stores), bounded so that one task stays a small record.
MAX_TEXT_CHARS = 32 * 1024


def _no_nul(text: str) -> str:
    if "\x00" in text:
        raise ValueError("must not contain a NUL character")
    return text


Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS), AfterValidator(_no_nul)]


class TaskInput(BaseModel):
    """One input of a fragment: the output stream of another task of the same owner."""

    model_config = ConfigDict(extra="forbid")

    task: NameRef = Field(description="The name of the task whose output this one reads.")


class TaskInputRead(TaskInput):
    """An input as the registry returns it: with the fragment its task runs, which says what
    the stream carries (a host may not be able to read the input task itself)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    fragment: str | None = None
    columns: str | None = Field(
        default=None,
        alias="schema",
        description="The columns of the input's stream as Spark DDL (its task's output_schema; "
        "null: not known yet).",
    )
    event_time: str = Field(
        default="stime",
        description="The stream's event-time column: a source's declared one, 'stime' for "
        "every other stream.",
    )
    served_by: str | None = Field(
        default=None,
        description="The participant whose data-plane endpoint serves the input's stream: its "
        "owner, or for a source running on a partner, that partner.",
    )
    active_copies: list[str] = Field(
        default_factory=list,
        description="Participants running an active replica of the input's task: each keeps "
        "the stream's stable rows in a log of its own, '<task>.out@<participant>' on its "
        "endpoint, which a consumer may read instead of the owner's (a bucket is the same in "
        "every copy's log).",
    )


class TaskCreate(BaseModel):
    """A task: a catalogue fragment (``fragment``, ``params``), your own work (``source``;
    ``sql`` or ``python`` over ``inputs``, with ``watermark``, ``schema``, ``sink``), or
    neither: a synthetic task, a declared ``load`` that the market moves and nothing runs."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(
        pattern=NAME_PATTERN,
        description="'<your participant name>.<local name>' (e.g. 'A.q01'); the local name has "
        "letters, digits, '_' and '-' only. Any other name is a 422.",
    )
    load: NonNegative | None = Field(
        default=None,
        description="Declared load in load units: required for a synthetic task; for real work "
        "an initial estimate (default 0) until its host measures it.",
    )
    synthetic: bool | None = Field(
        default=None,
        description="True: a declared load, nothing runs (implied when the task names no "
        "fragment and no work).",
    )
    fragment: NameRef | None = Field(
        default=None,
        description="A fragment kind of the catalogue (e.g. 'generator', "
        "'connections_per_source'); absent: a declared load, nothing runs.",
    )
    params: JsonObject = Field(
        default_factory=dict, description="The fragment's parameters; defaults fill the rest."
    )
    inputs: list[TaskInput] = Field(
        default_factory=list,
        max_length=MAX_LIST_ITEMS,
        description="Tasks of yours whose output streams it reads.",
    )
    source: JsonObject | None = Field(
        default=None,
        description="A stream entering here: {kind: generator|files|nats|flight, schema: "
        "'<Spark DDL>', event_time: <a TIMESTAMP column>, and the kind's options (files: "
        "format, path; nats: stream, subject, url)}.",
    )
    sql: Text | None = Field(
        default=None,
        description="A Spark SQL SELECT over the inputs, each a view named by its local name "
        "(A.readings is 'readings'); checked against the inputs' schemas.",
    )
    python: ShortText | None = Field(
        default=None, description="'package.module:function' from ``distribution``."
    )
    distribution: ShortText | None = Field(
        default=None,
        description="The Python distribution providing ``python``: 'name==version', or 'name' "
        "when installed at the registry (its version is recorded).",
    )
    watermark: ShortText | None = Field(
        default=None, description="How late an input row may be, e.g. '10 seconds', '1 hour'."
    )
    trigger: ShortText | None = Field(
        default=None,
        description="How often the query runs a micro-batch, e.g. '2 seconds' (0.1-60 s; "
        "default the agent's, 0.5 s). Each batch costs a fixed amount whatever it reads.",
    )
    columns: Text | None = Field(
        default=None,
        alias="schema",
        description="The output schema as Spark DDL: required for a python fragment.",
    )
    sink: JsonObject | None = Field(
        default=None,
        description="Where the output is also written at your host: {kind: parquet, path} or "
        "{kind: nats, subject}; the log is always written.",
    )

    def definition(self) -> dict[str, Any]:
        """The fields as the shared rule (app.tasks.definition) reads them."""
        out = self.model_dump(by_alias=True, exclude={"name"})
        out["inputs"] = [i.model_dump() for i in self.inputs]
        return out


class AnalysisReport(BaseModel):
    """What the task's owner's agent found when it analysed the task's work with Spark."""

    model_config = ConfigDict(extra="forbid")

    error: Text | None = Field(
        default=None, description="What Spark refused (null: the analysis passed; clears it)."
    )
    output_schema: Text | None = Field(
        default=None,
        description="The output stream's columns as Spark analysed them (Spark DDL); null "
        "keeps the one recorded.",
    )


class TaskUpdate(BaseModel):
    """A change of declared load (owner or admin) and/or of the pin (admin only)."""

    model_config = ConfigDict(extra="forbid")

    load: NonNegative | None = Field(default=None, description="New declared load.")
    pinned: bool | None = Field(default=None, description="Admin only: keep it where it is.")

    @model_validator(mode="after")
    def _something(self) -> TaskUpdate:
        if self.load is None and self.pinned is None:
            raise ValueError("send 'load' and/or 'pinned'")
        return self


class TaskRead(BaseModel):
    id: int
    name: str
    owner: str
    host: str
    load: float
    contract_id: int | None
    price: float | None
    host_since: datetime
    pinned: bool
    lease_epoch: int
    fragment: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    inputs: list[TaskInputRead] = Field(default_factory=list)
    work: dict[str, Any] = Field(
        default_factory=dict,
        description="Your own work as recorded (source, sql, python with distribution and "
        "distribution_version, watermark, schema, sink); empty for a catalogue fragment.",
    )
    synthetic: bool = Field(default=False, description="A declared load: nothing runs.")
    output_schema: str | None = Field(
        default=None, description="The output stream's columns as Spark DDL (null: not known)."
    )
    analysis_error: str | None = Field(
        default=None, description="What the owner's agent's Spark analysis found wrong."
    )
