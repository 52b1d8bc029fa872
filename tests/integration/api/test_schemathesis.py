"""Schemathesis over the published OpenAPI, as a participant and as the admin (issue 15).

Property-based requests, valid and invalid, to every operation: none may be answered with a
server error, and every response must match the published schema (status code documented,
body and headers as declared, invalid requests refused). Deterministic: Hypothesis is
derandomized, with a fixed number of examples per operation, so a CI run is repeatable and
its wall time bounded.

One check is left out: ``positive_data_acceptance`` (schema-valid data must not get a 4xx).
A free-form object (a profile) may be schema-valid and still hold a NUL or a NaN that no
backend stores; refusing it with a 422 naming the field is the intended answer (the
bad-input table pins those).
"""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.failures import FailureGroup
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import positive_data_acceptance

from app.db.session import dispose_engines
from app.main import create_app
from app.settings import Settings
from tests.integration.api.conftest import ADMIN_KEY, Api

# Per operation, per generation mode, per caller: 30 operations x 2 x 8 x 2, less what
# Hypothesis finds no new input for: about 1,200 cases.
EXAMPLES = 8
MINIMUM_CASES = 1000


@pytest.fixture(scope="module")
def seeded_app(sqlite_template: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A registry with something to find: A, B, C; an active contract A-B; A's task q1 and an
    open offer of it to B. Requests change it as they go; that is part of the test."""
    path = tmp_path_factory.mktemp("schemathesis") / "registry.db"
    shutil.copy(sqlite_template, path)
    url = f"sqlite:///{path}"
    app = create_app(Settings(database_url=url, admin_key=ADMIN_KEY, environment="test"))
    with TestClient(app) as client:
        api = Api(client=client, keys={})
        for name in ("A", "B", "C"):
            api.register(name)
        cid = api.propose("A", "B")["id"]
        assert api.post("B", f"/v1/contracts/{cid}/accept", {"version": 1}).status_code == 200
        assert api.post("A", "/v1/tasks", {"name": "A.q1", "load": 5}).status_code == 201
        offer = {"contract_id": cid, "tasks": ["A.q1"], "price": 0.9}
        assert api.post("A", "/v1/offers", offer).status_code == 201
        yield app, api.keys
    dispose_engines(url)


def _run(schema: Any, session: Any, key: str) -> tuple[int, Counter[str], Counter[int]]:
    cases: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    headers = {"Authorization": f"Bearer {key}"}
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            label = f"{operation.label} [{mode.value}]"
            test = _operation_test(
                operation, mode, label, session, headers, cases, failures, statuses
            )
            # Unsatisfiable: nothing invalid to send (an operation without parameters).
            with contextlib.suppress(Unsatisfiable):
                test()
    return sum(cases.values()), failures, statuses


def _operation_test(
    operation: Any,
    mode: GenerationMode,
    label: str,
    session: Any,
    headers: dict[str, str],
    cases: Counter[str],
    failures: Counter[str],
    statuses: Counter[int],
) -> Any:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def test(case: Any) -> None:
        cases[label] += 1
        try:
            response = case.call_and_validate(
                session=session, headers=headers, excluded_checks=[positive_data_acceptance]
            )
            statuses[response.status_code] += 1
        except (AssertionError, FailureGroup) as failure:
            found = failure.exceptions if isinstance(failure, FailureGroup) else [failure]
            for one in found:
                lines = [line for line in str(one).splitlines() if line.strip()]
                failures[f"{label}: {' | '.join(lines[:3])}"] += 1

    return test


def test_the_api_answers_property_based_requests_within_its_schema(seeded_app: Any) -> None:
    app, keys = seeded_app
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    total = 0
    found: Counter[str] = Counter()
    with asgi.get_client(app) as session:
        for who, key in (("A", keys["A"]), ("admin", ADMIN_KEY)):
            cases, failures, statuses = _run(schema, session, key)
            total += cases
            found.update(failures)
            assert not found, "\n".join(f"{n} x {fail}" for fail, n in found.most_common())
            # The key was used: the API did real work (invalid cases may break the header,
            # so some 401s are right).
            successes = sum(n for status, n in statuses.items() if status < 300)
            assert successes >= 50 and statuses[401] < cases / 3, (who, statuses)
    assert total >= MINIMUM_CASES, total


def test_an_unsupported_method_is_405_with_allow(seeded_app: Any) -> None:
    app, keys = seeded_app
    spec = app.openapi()
    with TestClient(app) as client:
        for template in spec["paths"]:
            path = template.replace("{", "").replace("}", "")  # any value will do
            # Every published path this one matches serves it (``me`` is also a ``{name}``).
            documented = sorted(
                {
                    method.upper()
                    for other, operations in spec["paths"].items()
                    if _matches(other, path)
                    for method in operations
                }
            )
            for method in ("GET", "POST", "PUT", "PATCH", "DELETE"):
                if method in documented:
                    continue
                response = client.request(
                    method, path, headers={"Authorization": f"Bearer {keys['A']}"}
                )
                assert response.status_code == 405, (method, template, response.text)
                assert response.headers["allow"] == ", ".join(documented), (method, template)
                assert response.json()["field"] == "method"


def _matches(template: str, path: str) -> bool:
    wanted, given = template.split("/"), path.split("/")
    return len(wanted) == len(given) and all(
        w == g or (w.startswith("{") and w.endswith("}"))
        for w, g in zip(wanted, given, strict=True)
    )
