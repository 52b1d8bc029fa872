"""The fragment catalogue (app/tasks/catalogue.py): one rule for API calls and contract files.

Kept here, beside the federation loader that applies the same rule to files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.participant.ports import TaskRecord
from app.tasks.catalogue import (
    CATALOGUE,
    Upstream,
    served_where_it_runs,
    validate_fragment,
)
from app.work.errors import FragmentError, field_name

ROOT = Path(__file__).resolve().parents[3]

TASKS = {
    "A.conns": Upstream("A.conns", "A", "generator"),
    "A.q02": Upstream("A.q02", "A", "distinct_ports_per_source"),
    "A.load": Upstream("A.load", "A", None),
    "B.conns": Upstream("B.conns", "B", "generator"),
}


def check(
    fragment: str | None,
    params: dict[str, Any] | None = None,
    inputs: list[Any] | None = None,
    *,
    task: str = "A.new",
) -> dict[str, Any]:
    return validate_fragment(fragment, params, inputs, task=task, owner="A", upstream=TASKS.get)


def test_catalogue_ships_the_generator_and_the_network_monitoring_fragments() -> None:
    assert set(CATALOGUE) == {
        "generator",
        "connections_per_source",
        "distinct_ports_per_source",
        "prefix_scanners",
    }
    assert CATALOGUE["generator"].is_source and CATALOGUE["generator"].min_inputs == 0
    for name in ("connections_per_source", "distinct_ports_per_source", "prefix_scanners"):
        assert not CATALOGUE[name].is_source and CATALOGUE[name].min_inputs >= 1


def test_a_source_is_served_where_it_runs_any_other_task_at_its_owner() -> None:
    assert served_where_it_runs("generator")
    for name in ("connections_per_source", "distinct_ports_per_source", "prefix_scanners", None):
        assert not served_where_it_runs(name)
    # What an agent learns of its inputs from the registry (TaskInputRead), in input order.
    record = TaskRecord.from_read(
        {
            "name": "A.x",
            "owner": "A",
            "host": "A",
            "load": 1.0,
            "fragment": "connections_per_source",
            "inputs": [
                {"task": "A.conns", "fragment": "generator", "served_by": "B"},
                {"task": "A.near", "fragment": "generator", "active_copies": ["C", "D"]},
            ],
        }
    )
    assert record.inputs == ("A.conns", "A.near")
    assert record.input_served_by == ("B", None)
    assert record.input_copies == ((), ("C", "D"))


def test_defaults_fill_what_is_not_given() -> None:
    assert check("generator") == {"seed": 7, "rate": 60.0, "scan_rate": 6.0}
    assert check("generator", {"seconds": 30, "rate": 120}) == {
        "seed": 7,
        "rate": 120.0,
        "seconds": 30,
        "scan_rate": 6.0,
    }
    conns = [{"task": "A.conns"}]
    assert check("connections_per_source", {}, conns) == {"window_seconds": 10, "threshold": 25}
    assert check("distinct_ports_per_source", {"threshold": 3}, conns) == {
        "window_seconds": 10,
        "threshold": 3,
    }
    assert check("prefix_scanners", {}, [{"task": "A.q02"}]) == {
        "window_seconds": 10,
        "min_scanners": 1,
    }


def test_parameters_of_the_spark_functions_are_the_catalogues() -> None:
    # The catalogue may not name a parameter the Spark function does not take (read as text:
    # unit tests import no Spark).
    source = (ROOT / "spark_jobs" / "fragments" / "network_monitoring.py").read_text()
    functions = {
        "connections_per_source": "def connection_counts(",
        "distinct_ports_per_source": "def distinct_port_counts(",
        "prefix_scanners": "def prefix_scanner_counts(",
    }
    for kind, header in functions.items():
        signature = source.split(header, 1)[1].split(") -> DataFrame", 1)[0]
        for param in CATALOGUE[kind].params:
            assert f"{param.name}: int" in signature, (kind, param.name)


def test_a_declared_load_has_no_params_or_inputs() -> None:
    assert check(None) == {}
    with pytest.raises(FragmentError) as info:
        check(None, {"seed": 1})
    assert info.value.field == "params"
    with pytest.raises(FragmentError) as info:
        check(None, None, [{"task": "A.conns"}])
    assert info.value.field == "inputs"


BAD: list[tuple[str | None, Any, Any, str, str]] = [
    # (fragment, params, inputs, field, words)
    ("sorting_hat", {}, [], "fragment", "unknown fragment 'sorting_hat'"),
    ("generator", {"speed": 3}, [], "params.speed", "no parameter 'speed'"),
    ("generator", {"seed": "seven"}, [], "params.seed", "must be a number"),
    ("generator", {"seed": 1.5}, [], "params.seed", "whole number"),
    ("generator", {"seed": True}, [], "params.seed", "must be a number"),
    ("generator", {"seed": -1}, [], "params.seed", "at least 0"),
    ("generator", {"rate": 0}, [], "params.rate", "greater than 0"),
    ("generator", {"rate": float("inf")}, [], "params.rate", "finite"),
    ("generator", {"seconds": 0}, [], "params.seconds", "at least 1"),
    ("generator", {}, [{"task": "A.conns"}], "inputs", "is a source"),
    (
        "connections_per_source",
        {"window_seconds": 0},
        [{"task": "A.conns"}],
        "params.window_seconds",
        "at least 1",
    ),
    ("connections_per_source", {}, [], "inputs", "at least 1 input"),
    ("connections_per_source", {}, [{"task": "A.new"}], "inputs[0].task", "its own output"),
    (
        "connections_per_source",
        {},
        [{"task": "A.conns"}, {"task": "A.conns"}],
        "inputs[1].task",
        "listed twice",
    ),
    ("connections_per_source", {}, [{"task": "nope"}], "inputs[0].task", "A owns no task"),
    # Someone else's task reads as unknown: the rule never tells who owns what.
    ("connections_per_source", {}, [{"task": "B.conns"}], "inputs[0].task", "A owns no task"),
    ("connections_per_source", {}, [{"task": "A.load"}], "inputs[0].task", "runs no fragment"),
    ("connections_per_source", {}, [{"x": 1}], "inputs[0].task", "{task: <task name>}"),
    # prefix_scanners reads port scanners, not raw connections.
    ("prefix_scanners", {}, [{"task": "A.conns"}], "inputs[0].task", "reads port_counts"),
]


@pytest.mark.parametrize(("fragment", "params", "inputs", "field", "words"), BAD)
def test_bad_fragment_names_the_field(
    fragment: str | None, params: Any, inputs: Any, field: str, words: str
) -> None:
    with pytest.raises(FragmentError) as info:
        check(fragment, params, inputs)
    assert info.value.field == field
    assert words in info.value.detail


def test_field_names_read_like_the_api_and_the_loader() -> None:
    assert field_name(("params", "window_seconds")) == "params.window_seconds"
    assert field_name(("inputs", 0, "task")) == "inputs[0].task"


def test_the_file_schema_lists_exactly_the_catalogue() -> None:
    schema = json.loads((ROOT / "contracts" / "federation.schema.json").read_text())
    assert set(schema["$defs"]["task"]["properties"]["fragment"]["enum"]) == set(CATALOGUE)
