"""The OpenAPI document's shared parts: the problem answers a route may give (RFC 9457)
and the request bodies a route reads itself, each a named schema in components.

A route lists the statuses it can refuse with and why; each is documented as
application/problem+json referencing the one ``Problem`` schema, so schemathesis and
clients know every answer's shape and an SDK generator makes one error model, not one
per route and status. A body a route parses itself (bounded JSON, a webhook's raw
bytes) is named with :func:`named_body`, so generators name its model too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from jobwarden.api.problems import PROBLEM_MEDIA_TYPE, Problem

PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}
_REF_TEMPLATE = "#/components/schemas/{model}"

COMMON = {
    401: "missing, unknown or revoked API token",
    403: "the token lacks this route's scope",
    422: "a parameter or the body does not match the schema (errors names each)",
}

# Schemas a route names through openapi_extra (FastAPI only collects the models of the
# parameters it parses itself); install_schemas writes them into components.
_NAMED: dict[str, dict[str, Any]] = {}


def problem_answers(described: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses``: exactly these statuses, each a Problem (problem+json)."""
    return {
        status: {
            "description": f"{text} (problem+json)",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_REF}},
        }
        for status, text in sorted(described.items())
    }


def problem_responses(why: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses``: the common refusals of a token-guarded route plus its own."""
    return problem_answers({**COMMON, **why})


def named_body(
    model: type[BaseModel] | str, schema: dict[str, Any] | None = None
) -> dict[str, Any]:
    """An ``openapi_extra`` requestBody whose JSON schema is the named component ``model``
    (a pydantic model, or a name with its ``schema``)."""
    if isinstance(model, str):
        assert schema is not None, "a named body without a model needs its schema"
        name, found = model, {"title": model, **schema}
    else:
        name, found = model.__name__, model.model_json_schema(ref_template=_REF_TEMPLATE)
    # Nested models ($defs) become components of their own, referenced by name.
    for nested, definition in found.pop("$defs", {}).items():
        _NAMED[nested] = definition
    _NAMED[name] = found
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": _REF_TEMPLATE.format(model=name)}}},
    }


def with_shared_schemas(app: FastAPI) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` with the Problem schema and every named body in its components."""
    plain = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = plain()
            schemas = document.setdefault("components", {}).setdefault("schemas", {})
            schemas["Problem"] = Problem.model_json_schema(ref_template=_REF_TEMPLATE)
            for name, schema in _NAMED.items():
                schemas.setdefault(name, schema)
            app.openapi_schema = document
        return app.openapi_schema

    return openapi
