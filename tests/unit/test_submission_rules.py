"""Intake's rules as pure functions: each hostile value is refused naming the field
and the rule; each valid one comes back normalised. No servers."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.intake.fingerprint import (
    EXACT_INTEGER,
    MAX_COMMAND_BYTES,
    MAX_DEPTH,
    canonical_command,
    child_path,
    request_fingerprint,
    show_key,
    shown_path,
)
from jobwarden.models.intake.submission import (
    HTTP_METHODS,
    FieldLimits,
    check_command,
    check_count,
    check_method,
    check_optional_text,
    check_route,
    check_seconds,
    check_submission,
    check_text,
)

LIMITS = FieldLimits(
    tenant=200,
    provider=200,
    idempotency_key=255,
    source_event_id=255,
    requested_by=190,
    method=10,
    route=500,
)


def _nested(depth: int) -> dict[str, Any]:
    command: dict[str, Any] = {}
    node = command
    for _ in range(depth):
        node["x"] = {}
        node = node["x"]
    return command


def _refused(message: str) -> Any:
    return pytest.raises(InvalidSubmissionError, match=re.escape(message))


# Text fields: type, blank, length, NUL, lone surrogates.


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "tenant must be a string, got NoneType"),
        (7, "tenant must be a string, got int"),
        (b"t", "tenant must be a string, got bytes"),
        ("", "tenant is required"),
        (" \t\n", "tenant is required"),
        ("t" * 11, "tenant is longer than 10 characters"),
        ("t\x00", "tenant contains a NUL character, which Postgres cannot store"),
        ("\x00", "tenant contains a NUL character"),
        ("t\ud800", "tenant contains a lone surrogate (U+D800), which is not valid UTF-8"),
        ("\udfff", "tenant contains a lone surrogate (U+DFFF)"),
    ],
)
def test_a_text_field_refuses_what_its_column_cannot_hold(value: object, message: str) -> None:
    with _refused(message):
        check_text("tenant", value, max_length=10)


@pytest.mark.parametrize("value", ["t", "t" * 10, "é\U0001f600 tab\th", " padded "])
def test_a_text_field_accepts_any_encodable_text_up_to_its_length(value: str) -> None:
    assert check_text("tenant", value, max_length=10) == value


def test_the_length_limit_counts_characters_as_postgres_does_not_bytes() -> None:
    assert check_text("tenant", "é" * 10, max_length=10) == "é" * 10


def test_an_optional_text_field_may_be_left_out_but_not_empty() -> None:
    assert check_optional_text("source_event_id", None, max_length=5) is None
    with _refused("source_event_id is required"):
        check_optional_text("source_event_id", "", max_length=5)
    with _refused("source_event_id is longer than 5 characters"):
        check_optional_text("source_event_id", "e" * 6, max_length=5)


# Method and route.


@pytest.mark.parametrize(
    ("value", "expected"), [("POST", "POST"), ("post", "POST"), ("Patch", "PATCH"), ("get", "GET")]
)
def test_the_method_is_any_http_method_upper_cased(value: str, expected: str) -> None:
    assert check_method(value, max_length=10) == expected


@pytest.mark.parametrize(
    "value",
    ["", "FETCH", "POSTS", " POST", "POST\x00", "po\u017ft", "P" * 11, None, 1, ["POST"]],
)
def test_anything_but_an_http_method_is_refused(value: object) -> None:
    with _refused("method must be one of CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST"):
        check_method(value, max_length=10)


def test_every_http_method_fits_the_method_column() -> None:
    assert max(len(m) for m in HTTP_METHODS) <= LIMITS.method


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "route must be a string, got NoneType"),
        ("", 'route must start with "/"'),
        ("providers/x", 'route must start with "/"'),
        ("/" + "r" * 20, "route is longer than 20 characters"),
        ("/a\nb", "route must be printable"),
        ("/a\x00", "route must be printable"),
        ("/\ud800", "route must be printable"),
        ("/a\u200bb", "route must be printable"),
    ],
)
def test_a_route_must_be_a_printable_absolute_path_within_its_column(
    value: object, message: str
) -> None:
    with _refused(message):
        check_route(value, max_length=20)


@pytest.mark.parametrize("value", ["/", "/providers/sandbox/operations", "/é/ a", "/" + "r" * 39])
def test_printable_absolute_routes_are_accepted(value: str) -> None:
    assert check_route(value, max_length=40) == value


# Budgets and deadlines.


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, "max_status_requests must be a whole number, got float"),
        (2.0, "max_status_requests must be a whole number, got float"),
        (True, "max_status_requests must be a whole number, got bool"),
        ("5", "max_status_requests must be a whole number, got str"),
        (0, "max_status_requests must be positive"),
        (-3, "max_status_requests must be positive"),
        (1_000_001, "max_status_requests must be at most 1000000"),
        (10**400, "max_status_requests must be at most 1000000"),
        (-(10**400), "max_status_requests must be positive"),
    ],
)
def test_a_budget_must_be_a_whole_number_from_1_to_a_million(value: object, message: str) -> None:
    with _refused(message):
        check_count("max_status_requests", value)


@pytest.mark.parametrize(("value", "expected"), [(None, None), (1, 1), (1_000_000, 1_000_000)])
def test_a_budget_within_bounds_or_left_out_is_accepted(value: int | None, expected: int) -> None:
    assert check_count("max_transport_failures", value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (math.inf, "cancel_deadline_seconds must be finite"),
        (-math.inf, "cancel_deadline_seconds must be finite"),
        (math.nan, "cancel_deadline_seconds must be finite"),
        (0, "cancel_deadline_seconds must be positive"),
        (-0.0, "cancel_deadline_seconds must be positive"),
        (-5, "cancel_deadline_seconds must be positive"),
        (30 * 24 * 3600 + 1, "cancel_deadline_seconds must be at most 2592000 seconds (30 days)"),
        (10**400, "cancel_deadline_seconds must be at most 2592000 seconds"),
        (1e300, "cancel_deadline_seconds must be at most 2592000 seconds"),
        (False, "cancel_deadline_seconds must be a number, got bool"),
        ("60", "cancel_deadline_seconds must be a number, got str"),
    ],
)
def test_a_deadline_must_be_finite_positive_and_at_most_30_days(
    value: object, message: str
) -> None:
    with _refused(message):
        check_seconds("cancel_deadline_seconds", value)


@pytest.mark.parametrize(
    ("value", "expected"), [(None, None), (0.001, 0.001), (60, 60.0), (2_592_000, 2_592_000.0)]
)
def test_a_deadline_within_bounds_comes_back_as_float_seconds(
    value: float | None, expected: float | None
) -> None:
    result = check_seconds("result_deadline_seconds", value)
    assert result == expected and (result is None or isinstance(result, float))


# The command: RFC 8785's domain, the bounds, and what JSONB keeps.


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([1], "command must be a JSON object"),
        ("{}", "command must be a JSON object"),
        (None, "command must be a JSON object"),
        ({"t": (1, 2)}, "command.t: tuple is not JSON"),
        ({"s": {1}}, "command.s: set is not JSON"),
        ({"b": b"x"}, "command.b: bytes is not JSON"),
        ({"o": object()}, "command.o: object is not JSON"),
        ({"k": {1: 2}}, "command.k: object keys must be strings"),
        ({"n": math.nan}, "command.n: number must be finite"),
        ({"n": [0, -math.inf]}, "command.n[1]: number must be finite"),
        ({"n": 2**53}, "command.n: integer 9007199254740992 is outside ±(2^53 - 1)"),
        ({"n": -(2**53)}, "is outside ±(2^53 - 1), the range RFC 8785"),
        ({"n": 10**5000}, "command.n: integer of 16610 bits is outside ±(2^53 - 1)"),
        ({"f": 1e20}, "command.f: number 1e+20 is outside ±(2^53 - 1); Postgres would return"),
        ({"f": -1e300}, "command.f: number -1e+300 is outside"),
        ({"f": 2.0**53}, "command.f: number 9007199254740992.0 is outside"),
        ({"s": "a\x00"}, "command.s contains a NUL character, which Postgres cannot store"),
        ({"a": [{"\x00": 1}]}, "command.a[0]: key '\\x00' contains a NUL character"),
        ({"s": "\ud800"}, "command.s contains a lone surrogate (U+D800)"),
        ({"\udc80": 1}, "command: key '\\udc80' contains a lone surrogate (U+DC80)"),
        (_nested(MAX_DEPTH + 1), f"command is nested deeper than {MAX_DEPTH} levels"),
        ({"blob": "x" * MAX_COMMAND_BYTES}, "the limit is 65536"),
        ({"many": [0] * MAX_COMMAND_BYTES}, "the limit is 65536"),
        ({"blob": "\x01" * 20_000}, "command is 120011 bytes canonicalised; the limit is 65536"),
    ],
)
def test_a_command_is_refused_naming_the_path_and_the_rule(command: object, message: str) -> None:
    with _refused(message):
        check_command(command)


def test_a_command_that_contains_itself_is_refused_as_too_deep() -> None:
    command: dict[str, Any] = {}
    command["self"] = command
    with _refused("nested deeper"):
        check_command(command)


@pytest.mark.parametrize(
    "command",
    [
        {},
        {"n": EXACT_INTEGER, "m": -EXACT_INTEGER, "f": 1.5e15, "tiny": 5e-324, "z": -0.0},
        {"s": "é\U0001f600\n\t", "": None, "nested": {"list": [True, False, None, "x"]}},
        _nested(MAX_DEPTH),
        {"blob": "x" * (MAX_COMMAND_BYTES - 20)},
    ],
)
def test_a_storable_json_object_is_accepted_unchanged(command: dict[str, Any]) -> None:
    assert check_command(command) is command


def test_the_fingerprint_alone_accepts_what_rfc8785_can_canonicalise() -> None:
    # NUL and big floats canonicalise; only intake refuses them, for Postgres's sake.
    assert (
        canonical_command({"s": "\x00", "f": 1e20}) == b'{"f":100000000000000000000,"s":"\\u0000"}'
    )


@pytest.mark.parametrize(
    "part", [{"tenant": "t\ud800"}, {"route": "/\udfff"}, {"provider": "\ud800"}]
)
def test_a_fingerprint_over_unencodable_text_is_refused_not_crashed(part: dict[str, str]) -> None:
    request = {"method": "POST", "route": "/r", "tenant": "t", "provider": "p", **part}
    with _refused("contains a lone surrogate"):
        request_fingerprint(**request, command={})


@pytest.mark.parametrize(
    ("path", "key", "expected"),
    [
        ("", "name", ".name"),
        (".a", "b_2", ".a.b_2"),
        ("", "with space", "['with space']"),
        ("", "line\nbreak", "['line\\nbreak']"),
        ("", "\x00", "['\\x00']"),
        ("", "é", "['\\xe9']"),
        ("", "k" * 50, "['" + "k" * 39 + "...]"),
    ],
)
def test_paths_in_errors_stay_on_one_short_ascii_line(path: str, key: str, expected: str) -> None:
    shown = child_path(path, key)
    assert shown == expected
    assert shown.isascii() and "\n" not in shown


def test_a_long_path_is_shown_by_its_tail() -> None:
    path = ".x" * 100
    assert shown_path(path) == "command..." + path[-60:]
    assert shown_path(".a") == "command.a"


def test_a_key_is_shown_escaped_and_cut_short() -> None:
    assert show_key("plain") == "'plain'"
    assert show_key("\U0001f600" * 10).isascii()
    assert len(show_key("\U0001f600" * 10)) == 43


# The whole submission.

VALID: dict[str, Any] = {
    "tenant": "acme",
    "provider": "sandbox",
    "idempotency_key": "k-1",
    "command": {"kind": "export"},
    "requested_by": "svc",
}


def test_a_valid_submission_comes_back_normalised() -> None:
    sub = check_submission(limits=LIMITS, providers={"sandbox"}, **VALID, method="post")
    assert (sub.method, sub.route, sub.source_event_id) == (
        "POST",
        "/providers/sandbox/operations",
        None,
    )
    assert (sub.max_status_requests, sub.cancel_deadline_seconds) == (None, None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tenant": "t" * 201}, "tenant is longer than 200 characters"),
        ({"provider": "nope"}, "unknown provider 'nope'; known: sandbox"),
        ({"provider": ["sandbox"]}, "provider must be a string, got list"),
        ({"idempotency_key": "k" * 256}, "idempotency_key is longer than 255 characters"),
        ({"requested_by": "r" * 191}, "requested_by is longer than 190 characters"),
        ({"source_event_id": "e\x00"}, "source_event_id contains a NUL character"),
        ({"method": "BREW"}, "method must be one of"),
        ({"route": "/" + "r" * 500}, "route is longer than 500 characters"),
        ({"max_status_requests": 1.5}, "max_status_requests must be a whole number"),
        ({"max_transport_failures": 0}, "max_transport_failures must be positive"),
        ({"result_deadline_seconds": math.inf}, "result_deadline_seconds must be finite"),
        ({"cancel_deadline_seconds": math.inf}, "cancel_deadline_seconds must be finite"),
        ({"command": {"n": 2**64}}, "command.n: integer 18446744073709551616 is outside"),
    ],
)
def test_a_submission_is_refused_at_its_first_bad_field(
    change: dict[str, Any], message: str
) -> None:
    with _refused(message):
        check_submission(limits=LIMITS, providers={"sandbox"}, **{**VALID, **change})


plain_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=30)


@given(tenant=plain_text, key=plain_text, by=plain_text)
def test_any_encodable_text_without_nul_is_accepted_when_it_fits(
    tenant: str, key: str, by: str
) -> None:
    request = {**VALID, "tenant": tenant or "t", "idempotency_key": key or "k", "requested_by": by}
    try:
        sub = check_submission(limits=LIMITS, providers={"sandbox"}, **request)
    except InvalidSubmissionError as exc:
        # The only text a rule may refuse here is blank text.
        assert str(exc).endswith("is required")
    else:
        assert (sub.tenant, sub.idempotency_key, sub.requested_by) == (
            request["tenant"],
            request["idempotency_key"],
            by,
        )


@given(value=st.one_of(st.floats(), st.integers(), st.booleans(), st.none(), st.text()))
def test_a_deadline_is_either_refused_or_a_finite_float_within_bounds(value: object) -> None:
    try:
        result = check_seconds("result_deadline_seconds", value)
    except InvalidSubmissionError:
        return
    assert result is None or (isinstance(result, float) and 0 < result <= 2_592_000)
