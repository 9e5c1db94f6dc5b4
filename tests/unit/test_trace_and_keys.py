"""W3C Trace Context traceparent parsing and the Idempotency-Key field's sf-string.

Cases follow W3C Trace Context Level 1 section 3.2 (lowercase hex, version ff
invalid, all-zero ids invalid, version 00 exactly 55 characters, later versions
may append fields) and RFC 8941 section 4.2.5 (sf-string parsing).
"""

from __future__ import annotations

import pytest

from jobwarden.api.intake import _sf_string
from jobwarden.models.intake.trace_context import trace_id_from, traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    "header",
    [f"00-{TRACE}-{PARENT}-01", f"00-{TRACE}-{PARENT}-00", f"01-{TRACE}-{PARENT}-01-future"],
)
def test_a_valid_traceparent_yields_its_trace_id(header: str) -> None:
    assert trace_id_from(header) == TRACE


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "garbage",
        f"ff-{TRACE}-{PARENT}-01",
        f"00-{'0' * 32}-{PARENT}-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"00-{TRACE.upper()}-{PARENT}-01",
        f"00-{TRACE}-{PARENT}-01-extra",
        f"00-{TRACE[:-1]}-{PARENT}-01",
        f"00_{TRACE}_{PARENT}_01",
    ],
)
def test_an_invalid_traceparent_yields_nothing(header: str | None) -> None:
    assert trace_id_from(header) is None


def test_our_traceparent_round_trips() -> None:
    assert trace_id_from(traceparent(TRACE, PARENT)) == TRACE


@pytest.mark.parametrize(
    ("raw", "key"),
    [('"abc"', "abc"), (r'"a\"b"', 'a"b'), (r'"a\\b"', "a\\b"), ('""', "")],
)
def test_an_sf_string_key_is_unquoted(raw: str, key: str) -> None:
    assert _sf_string(raw) == key


@pytest.mark.parametrize("raw", ['"abc', '"a"b"', r'"a\x"', '"tab\there"', '"é"'])
def test_a_broken_sf_string_is_refused(raw: str) -> None:
    assert _sf_string(raw) is None
