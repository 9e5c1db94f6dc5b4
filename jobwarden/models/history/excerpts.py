"""Bounded, secret-free excerpts of provider answers, for the history.

The one list of words that mark a secret lives here; the contract loader uses
it to refuse literal credentials, and excerpts redact keys containing one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Final

from jobwarden.models.provider.signals import RawResponse

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


# One scan per key instead of one per word: every key of every excerpt passes here.
_SECRET_WORD: Final = re.compile("|".join(re.escape(word) for word in SECRET_WORDS))


def names_a_secret(name: str) -> bool:
    return _SECRET_WORD.search(name.lower()) is not None


REDACTED: Final = "[redacted]"


def storable(text: str) -> str:
    """``text`` as Postgres can store it: NUL and lone surrogates escaped, not lost.

    JSON allows ``\u0000`` and unpaired surrogates; text columns and JSONB refuse
    them, and a refused write would crash the step that recorded the answer.
    """
    if text.isascii() and "\x00" not in text:
        return text
    text = text.replace("\x00", "\\u0000")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def scrub_text(text: str, secrets: Sequence[str]) -> str:
    """``text`` with every occurrence of a configured secret form replaced, storable."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return storable(text)


def redacted(value: Any, secrets: Sequence[str], depth: int = 0) -> Any:
    """``value`` with secret-named keys and configured secret values replaced, whole and
    uncut (unlike an excerpt): an approver reads the command and request they authorize."""
    if depth > 20:
        return "…"
    if isinstance(value, dict):
        return {
            str(k): REDACTED if names_a_secret(str(k)) else redacted(v, secrets, depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redacted(v, secrets, depth + 1) for v in value]
    if isinstance(value, str):
        return scrub_text(value, secrets)
    return value


def _scrub(value: Any, secrets: Sequence[str], depth: int = 0) -> Any:
    if depth > 6:
        return "…"
    if isinstance(value, dict):
        return {
            scrub_text(str(k), secrets): (
                REDACTED if names_a_secret(str(k)) else _scrub(v, secrets, depth + 1)
            )
            for k, v in list(value.items())[:50]
        }
    if isinstance(value, list):
        return [_scrub(v, secrets, depth + 1) for v in value[:20]]
    if isinstance(value, str):
        # By value, before cutting: a secret split by the cut would survive in part.
        value = scrub_text(value, secrets)
        return value[:300] + "…" if len(value) > 300 else value
    return value


HEADER_LIMIT: Final = 500


def _bounded(value: str) -> str:
    return value if len(value) <= HEADER_LIMIT else f"{value[:HEADER_LIMIT]}… ({len(value)} chars)"


def excerpt(raw: RawResponse, secrets: Sequence[str] = (), **extra: Any) -> dict[str, Any]:
    """A bounded, secret-free summary of a provider response for the history.

    ``secrets`` are the credential's forms (plain, base64, URL-encoded): a provider
    that echoes one back in a body, a header or a malformed text is redacted by value.
    """
    obs = raw.observation
    out: dict[str, Any] = {k: _scrub(v, secrets) for k, v in extra.items() if v is not None}
    if obs.transport_failure is not None:
        out["transport_failure"] = obs.transport_failure.value
        return out
    # A header value is bounded like a body: a monitor URL may be 16 KiB, a junk one more.
    headers = {
        h: _bounded(scrub_text(obs.headers[h], secrets))
        for h in EXCERPT_HEADERS
        if h in obs.headers
    }
    if headers:
        out["headers"] = headers
    if obs.body_problem:
        out["body_problem"] = obs.body_problem
        out["body_text"] = scrub_text(raw.content[:4096].decode("utf-8", "replace"), secrets)[:200]
    elif obs.body is not None:
        body = _scrub(obs.body, secrets)
        if len(json.dumps(body, default=str)) > EXCERPT_LIMIT:
            body = {"truncated": json.dumps(body, default=str)[:EXCERPT_LIMIT]}
        out["body"] = body
    return out
