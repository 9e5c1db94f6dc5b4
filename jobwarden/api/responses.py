"""OpenAPI documentation of the problem answers a route may give (RFC 9457).

A route lists the statuses it can refuse with and why; each is documented as
application/problem+json, so schemathesis and clients know every answer's shape.
"""

from __future__ import annotations

from typing import Any

from jobwarden.api.problems import PROBLEM_MEDIA_TYPE

PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "instance": {"type": "string"},
    },
    # RFC 9457 section 3.2: extension members (errors, offered, required_scope ...).
    "additionalProperties": True,
}

COMMON = {
    401: "missing, unknown or revoked API token",
    403: "the token lacks this route's scope",
    422: "a parameter or the body does not match the schema (errors names each)",
}


def problem_responses(why: dict[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses``: the common refusals plus the route's own (status -> why)."""
    described = {**COMMON, **why}
    return {
        status: {
            "description": f"{text} (problem+json)",
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}},
        }
        for status, text in sorted(described.items())
    }
