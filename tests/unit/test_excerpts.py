"""History excerpts redact a credential by value, wherever a provider echoes it."""

from __future__ import annotations

import base64
import urllib.parse

from jobwarden.models.history.excerpts import REDACTED, excerpt
from tests.unit.factories import answer

SECRET = "sk-live-0123456789abcdef"
FORMS = (
    SECRET,
    base64.b64encode(SECRET.encode()).decode(),
    urllib.parse.quote(SECRET, safe=""),
)


def test_an_echoed_credential_is_redacted_in_bodies_headers_and_extras() -> None:
    raw = answer(
        200,
        {"status": "running", "debug": {"auth": f"Bearer {SECRET}", "note": [FORMS[1]]}},
        location=f"https://p.test/x?token={FORMS[2]}",
    )
    ex = excerpt(raw, FORMS, job_id=f"job-{SECRET}")
    text = repr(ex)
    assert all(form not in text for form in FORMS)
    assert ex["body"]["debug"]["auth"] == f"Bearer {REDACTED}"
    assert ex["body"]["debug"]["note"] == [REDACTED]
    assert REDACTED in ex["headers"]["location"] and REDACTED in ex["job_id"]


def test_an_echoed_credential_in_an_unparsable_body_is_redacted_before_the_cut() -> None:
    content = (b"x" * 190) + SECRET.encode() + b"<html>"
    raw = answer(200, None, content=content, body_problem="malformed_json")
    assert SECRET[:10] not in excerpt(raw, FORMS)["body_text"]


def test_without_configured_secrets_only_secret_looking_keys_are_redacted() -> None:
    ex = excerpt(answer(200, {"api_key": "abc", "id": SECRET}))
    assert ex["body"] == {"api_key": REDACTED, "id": SECRET}


def test_nul_and_lone_surrogates_from_a_provider_are_escaped_not_lost() -> None:
    raw = answer(200, {"state": "run\x00ning", "note": "\ud800x", "k\x00": 1})
    ex = excerpt(raw)
    stored = repr(ex)
    assert "\x00" not in stored and "\ud800" not in stored
    assert ex["body"]["state"] == "run\\u0000ning"
    assert ex["body"]["note"] == "\\ud800x"
    # What Postgres refuses is gone; psycopg could encode every string.
    for text in (ex["body"]["state"], ex["body"]["note"], *ex["body"]):
        text.encode("utf-8")
