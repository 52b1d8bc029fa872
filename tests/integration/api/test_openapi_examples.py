"""Every request and response schema of the published OpenAPI has an example, and each example
is valid against its schema (app/openapi_examples.py; issue 15, item 7)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from app.main import create_app
from app.openapi_examples import EXAMPLES
from app.settings import Settings


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    # Generating the document touches no database.
    return create_app(Settings(database_url="sqlite://", environment="test")).openapi()


def test_every_component_schema_has_an_example(openapi: dict[str, Any]) -> None:
    schemas = openapi["components"]["schemas"]
    assert len(schemas) >= 40
    missing = sorted(name for name, schema in schemas.items() if not schema.get("examples"))
    assert not missing, f"add an example for each to EXAMPLES in app/openapi_examples.py: {missing}"
    stale = sorted(set(EXAMPLES) - set(schemas))
    assert not stale, f"examples for schemas the API no longer has: {stale}"


def test_every_example_validates_against_its_schema(openapi: dict[str, Any]) -> None:
    components = openapi["components"]
    invalid = {}
    for name, schema in components["schemas"].items():
        # Resolve $refs against the whole document, as an OpenAPI 3.1 reader does.
        validator = jsonschema.Draft202012Validator(
            {"$ref": f"#/components/schemas/{name}", "components": components},
            format_checker=jsonschema.FormatChecker(),
        )
        for example in schema.get("examples", []):
            errors = [
                f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(example)
            ]
            if errors:
                invalid[name] = errors
    assert not invalid, invalid


def test_the_validation_catches_a_wrong_example(openapi: dict[str, Any]) -> None:
    components = openapi["components"]
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/ParticipantCreate", "components": components}
    )
    assert not list(validator.iter_errors(EXAMPLES["ParticipantCreate"]))
    wrong = {**EXAMPLES["ParticipantCreate"], "capacity": -5}
    assert [e.message for e in validator.iter_errors(wrong)] == [
        "-5 is less than or equal to the minimum of 0.0"
    ]
