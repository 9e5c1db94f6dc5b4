"""Bounded, secret-free excerpts of provider answers, for the history.

The one list of words that mark a secret lives here; the contract loader uses
it to refuse literal credentials, and excerpts redact keys containing one.
"""

from __future__ import annotations

import json
from typing import Any, Final

from jobwarden.models.signals import RawResponse

SECRET_WORDS: Final = (
    "token",
    "secret",
    "password",
    "passwd",
    "authorization",
    "api_key",
    "apikey",
    "api-key",
    "credential",
    "cookie",
    "bearer",
    "private_key",
)
EXCERPT_LIMIT: Final = 2000
EXCERPT_HEADERS: Final = ("retry-after", "location", "operation-location", "idempotent-replayed")


def names_a_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def _scrub(value: Any, depth: int = 0) -> Any:
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            k: ("[redacted]" if names_a_secret(str(k)) else _scrub(v, depth + 1))
            for k, v in list(value.items())[:50]
        }
    if isinstance(value, list):
        return [_scrub(v, depth + 1) for v in value[:20]]
    if isinstance(value, str) and len(value) > 300:
        return value[:300] + "…"
    return value


def excerpt(raw: RawResponse, **extra: Any) -> dict[str, Any]:
    """A bounded, secret-free summary of a provider response for the history."""
    obs = raw.observation
    out: dict[str, Any] = {k: v for k, v in extra.items() if v is not None}
    if obs.transport_failure is not None:
        out["transport_failure"] = obs.transport_failure.value
        return out
    headers = {h: obs.headers[h] for h in EXCERPT_HEADERS if h in obs.headers}
    if headers:
        out["headers"] = headers
    if obs.body_problem:
        out["body_problem"] = obs.body_problem
        out["body_text"] = raw.content[:200].decode("utf-8", "replace")
    elif obs.body is not None:
        body = _scrub(obs.body)
        if len(json.dumps(body, default=str)) > EXCERPT_LIMIT:
            body = {"truncated": json.dumps(body, default=str)[:EXCERPT_LIMIT]}
        out["body"] = body
    return out
