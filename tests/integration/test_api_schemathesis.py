"""schemathesis against the app's own /openapi.json: no 5xx, no answer outside the schema.

Every operation gets bounded property-based examples (schemathesis 4, on Hypothesis)
sent over real HTTP with a token holding every scope. The checks are schemathesis's
defaults but ``positive_data_acceptance``: a schema-valid body naming a provider or a
command no contract knows is rightly refused (422), which that check would call a bug.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.internal.lambda_sources import lambda_description
from schemathesis.core.result import Ok
from schemathesis.generation.jsonschema.strategy import _TYPE_CHECKS

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from tests.api_server import serving

# CPython 3.11's ast.parse can fail with "SystemError: AST constructor recursion depth
# mismatch" (python/cpython gh-106905: its counter is shared, and a threaded program can
# meet it), which this machine's 3.11.7 raised deep inside a run under load. Hypothesis
# parses the source of schemathesis's strategy module to describe its lambdas, the first
# time in the middle of a test; described here, at collection, the parse is cached for the
# run (hypothesis.internal.lambda_sources keeps it per source).
lambda_description(_TYPE_CHECKS["null"])  # type: ignore[no-untyped-call]

SCHEMA = schemathesis.openapi.from_dict(create_app().openapi())
LOADED = list(SCHEMA.get_all_operations())
OPERATIONS = {f"{r.ok().method.upper()} {r.ok().path}": r.ok() for r in LOADED if isinstance(r, Ok)}
EXAMPLES = 25


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


@pytest.fixture(scope="module")
def bearer(database_url: str) -> str:
    return create_token(database_url, tenant="schemathesis", name="fuzz", scopes=list(Scope)).token


def test_every_operation_of_the_schema_loads_and_the_intake_route_is_one() -> None:
    assert [r for r in LOADED if not isinstance(r, Ok)] == []
    assert "POST /v1/operations" in OPERATIONS


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_no_operation_answers_a_5xx_or_outside_its_schema(
    api: str, bearer: str, label: str
) -> None:
    operation = OPERATIONS[label]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy())
    def examples(case: Any) -> None:
        case.call_and_validate(
            base_url=api,
            headers={"Authorization": f"Bearer {bearer}"},
            excluded_checks=[schemathesis.checks.positive_data_acceptance],
        )

    examples()
