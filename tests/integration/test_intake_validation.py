"""Intake against the real database: every hostile submission is refused with
InvalidSubmissionError naming the field, and nothing is ever half-written.

Each example submits under a tenant of its own (a fresh prefix), so the rows it
may have written are found by that prefix alone, even when the rest of the
tenant holds NUL characters or lone surrogates that Postgres could not match.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from jobwarden.config.settings import get_settings
from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.intake.fingerprint import EXACT_INTEGER, canonical_command
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import EventRow, OperationRow, TimerRow
from jobwarden.tasks.intake import (
    SubmitOutcome,
    SubmitResult,
    submit_from_message,
    submit_operation,
)
from jobwarden.tasks.runtime import Runtime, build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.cli_runner import CliResult, run_cli

REPO = Path(__file__).resolve().parents[2]
FUZZ_QUEUE_SUFFIX = "intake-fuzz"

# Every code point, NUL and lone surrogates included (hypothesis leaves surrogates out by default).
ANY_CHAR = st.characters(exclude_categories=())
ODD_CHARS = st.sampled_from(["\x00", "\ud800", "\udfff", "\n", "\t", " ", "é", "\U0001f600", "a"])
STORABLE_CHAR = st.characters(codec="utf-8", exclude_characters="\x00")


def _repeat(char: str, times: int) -> str:
    return char * times


def _near_a_limit(times: int, tail: str) -> str:
    return "k" * times + tail


any_text = st.one_of(
    st.text(ANY_CHAR, max_size=12),
    st.builds(_repeat, ODD_CHARS, st.integers(0, 600)),
    # Lengths around every column's limit (10, 200, 255, 500), ending in an odd character.
    st.builds(
        _near_a_limit, st.sampled_from([9, 10, 189, 190, 199, 200, 254, 255, 499, 500]), ODD_CHARS
    ),
)
not_text = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.binary(max_size=3),
    st.lists(st.integers(), max_size=2),
    st.tuples(st.text(max_size=2)),
)
extreme_numbers = st.one_of(
    st.integers(),
    st.integers(min_value=2**53 - 2, max_value=2**64),
    st.integers(min_value=-(2**64), max_value=-(2**53) + 2),
    st.sampled_from([10**400, -(10**400), 1e300, -1e300, 1e20, 5e-324, -0.0, 2.0**53]),
    st.floats(),
)
json_leaves = st.one_of(st.none(), st.booleans(), extreme_numbers, any_text)
not_json = st.one_of(
    st.binary(max_size=3),
    st.tuples(st.integers()),
    st.frozensets(st.integers(), max_size=2),
    st.builds(object),
)
command_keys = st.one_of(st.text(max_size=8), any_text, st.integers(), st.none())


def _nested(depth: int) -> dict[str, Any]:
    command: dict[str, Any] = {}
    node = command
    for _ in range(depth):
        node["x"] = {}
        node = node["x"]
    return command


hostile_commands = st.one_of(
    st.recursive(
        json_leaves | not_json,
        lambda inner: (
            st.lists(inner, max_size=4) | st.dictionaries(command_keys, inner, max_size=4)
        ),
        max_leaves=20,
    ),
    st.dictionaries(command_keys, json_leaves, max_size=6),
    st.integers(0, 70).map(_nested),
    st.integers(0, 300_000).map(lambda n: {"blob": "x" * n}),
)
counts = st.one_of(st.integers(-3, 2_000_000), extreme_numbers, st.booleans(), any_text)
durations = st.one_of(st.floats(), st.integers(), extreme_numbers, st.booleans(), any_text)

HOSTILE: dict[str, st.SearchStrategy[Any]] = {
    "tenant": st.one_of(any_text, not_text),
    "provider": st.one_of(st.sampled_from(["sandbox", "openai_batch"]), any_text, not_text),
    "idempotency_key": st.one_of(any_text, not_text),
    "command": st.one_of(hostile_commands, not_text),
    "requested_by": st.one_of(any_text, not_text),
    "source_event_id": st.one_of(any_text, not_text),
    "method": st.one_of(
        # "po\u017ft" (a long s) upper-cases to "POST": only ASCII spellings are accepted.
        st.sampled_from(["post", "GET", "PATCH", "POSTS", "po\u017ft"]),
        any_text,
        not_text,
    ),
    "route": st.one_of(any_text.map(lambda s: "/" + s), any_text, not_text),
    "max_status_requests": counts,
    "max_transport_failures": counts,
    "result_deadline_seconds": durations,
    "cancel_deadline_seconds": durations,
}
plain_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(-1e15, 1e15)
    | st.text(STORABLE_CHAR, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(STORABLE_CHAR, max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
VALID: dict[str, st.SearchStrategy[Any]] = {
    "tenant": st.text(STORABLE_CHAR, max_size=20),  # appended to the example's own prefix
    "provider": st.just("sandbox"),
    "idempotency_key": st.text(STORABLE_CHAR, min_size=1, max_size=40).filter(str.strip),
    "command": st.dictionaries(st.text(STORABLE_CHAR, max_size=6), plain_json, max_size=4),
    "requested_by": st.text(STORABLE_CHAR, min_size=1, max_size=20).filter(str.strip),
}


@st.composite
def submissions(draw: st.DrawFn) -> dict[str, Any]:
    """A submission with up to four hostile arguments; the rest valid or left out."""
    hostile = draw(st.sets(st.sampled_from(sorted(HOSTILE)), max_size=4))
    request: dict[str, Any] = {}
    for name, strategy in HOSTILE.items():
        if name in hostile:
            request[name] = draw(strategy)
        elif name in VALID:
            request[name] = draw(VALID[name])
    return request


@pytest.fixture(scope="module")
def runtime(database_url: str) -> Iterator[Runtime]:
    """The run's runtime, publishing wake-ups to a queue of its own that is purged afterwards."""
    base = get_settings()
    fuzz = base.model_copy(update={"queue": f"{base.queue}-{FUZZ_QUEUE_SUFFIX}"})
    rt = build_runtime(fuzz)
    yield rt
    for key in rt.redis.scan_iter(f"{base.key_prefix}:celery:*{FUZZ_QUEUE_SUFFIX}*"):
        rt.redis.delete(key)
    rt.redis.close()
    close_runtime(rt)


def _written(database_url: str, prefix: str) -> tuple[list[OperationRow], list[str]]:
    """The operations under a tenant prefix and the kinds of their events."""
    pattern = f"{prefix}%"
    with transaction(database_url) as session:
        rows = list(session.scalars(select(OperationRow).where(OperationRow.tenant.like(pattern))))
        for row in rows:
            session.expunge(row)
        kinds = list(
            session.scalars(
                select(EventRow.kind)
                .join(OperationRow, OperationRow.operation_id == EventRow.operation_id)
                .where(OperationRow.tenant.like(pattern))
            )
        )
    return rows, kinds


def _submit_and_check(database_url: str, runtime: Runtime, request: dict[str, Any]) -> None:
    """Submit once under a fresh tenant prefix: refused and nothing written, or created
    with exactly its row and its intent event."""
    prefix = f"fz{secrets.token_hex(6)}-"
    tenant = request["tenant"]
    request = {**request, "tenant": prefix + tenant if isinstance(tenant, str) else tenant}
    try:
        result = submit_operation(**request, runtime=runtime)
    except InvalidSubmissionError as exc:
        assert str(exc)
        assert _written(database_url, prefix) == ([], [])
        return
    assert isinstance(tenant, str)
    assert isinstance(result, SubmitResult)
    # A tenant of its own can only be new: anything but "created" would be a lie.
    assert result.outcome is SubmitOutcome.created
    rows, kinds = _written(database_url, prefix)
    assert [str(row.operation_id) for row in rows] == [result.operation_id]
    assert kinds == ["intent_recorded"]
    assert rows[0].request_fingerprint == result.fingerprint


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(request=submissions())
def test_every_submission_either_answers_or_is_refused_and_nothing_is_half_written(
    database_url: str, runtime: Runtime, request: dict[str, Any]
) -> None:
    _submit_and_check(database_url, runtime, request)


def _valid_request(**changes: Any) -> dict[str, Any]:
    return {
        "tenant": f"fz{secrets.token_hex(6)}",
        "provider": "sandbox",
        "idempotency_key": secrets.token_hex(8),
        "command": {"kind": "export"},
        "requested_by": "pytest",
        **changes,
    }


REFUSALS: list[tuple[str, dict[str, Any], str]] = [
    ("tenant_too_long_for_its_column", {"tenant": "t" * 201}, "tenant is longer than 200"),
    ("key_with_a_nul", {"idempotency_key": "k\x00"}, "idempotency_key contains a NUL"),
    ("requested_by_with_a_surrogate", {"requested_by": "\udcff"}, "requested_by contains a lone"),
    ("long_source_event", {"source_event_id": "e" * 256}, "source_event_id is longer than 255"),
    ("unknown_method", {"method": "FETCH"}, "method must be one of"),
    ("long_method", {"method": "P" * 11}, "method must be one of"),
    ("route_without_slash", {"route": "providers"}, "route must start with"),
    ("route_with_newline", {"route": "/a\nb"}, "route must be printable"),
    ("route_too_long", {"route": "/" + "r" * 500}, "route is longer than 500"),
    ("fractional_count", {"max_status_requests": 1.5}, "max_status_requests must be a whole"),
    ("boolean_count", {"max_transport_failures": True}, "max_transport_failures must be a whole"),
    ("huge_count", {"max_status_requests": 10**30}, "max_status_requests must be at most"),
    ("infinite_cancel_deadline", {"cancel_deadline_seconds": float("inf")}, "must be finite"),
    ("huge_result_deadline", {"result_deadline_seconds": 10**400}, "must be at most"),
    ("nul_in_command_value", {"command": {"a": "\x00"}}, r"command\.a contains a NUL"),
    ("nul_in_command_key", {"command": {"\x00": 1}}, "contains a NUL"),
    ("surrogate_in_command_key", {"command": {"\ud800": 1}}, "lone surrogate"),
    ("big_float_in_command", {"command": {"n": 1e20}}, r"2\^53 - 1"),
    ("huge_integer_in_command", {"command": {"n": 10**5000}}, r"2\^53 - 1"),
    ("tuple_in_command", {"command": {"t": (1, 2)}}, "tuple is not JSON"),
    ("deep_command", {"command": _nested(40)}, "nested deeper than 32"),
    ("large_command", {"command": {"blob": "x" * 70_000}}, "the limit is 65536"),
]


@pytest.mark.parametrize(
    ("change", "message"), [(c, m) for _, c, m in REFUSALS], ids=[i for i, _, _ in REFUSALS]
)
def test_each_hostile_field_is_refused_naming_the_field_and_the_rule(
    database_url: str, runtime: Runtime, change: dict[str, Any], message: str
) -> None:
    request = _valid_request(**change)
    with pytest.raises(InvalidSubmissionError, match=message):
        submit_operation(**request, runtime=runtime)
    assert _written(database_url, request["tenant"]) == ([], [])


def test_limits_at_the_column_lengths_are_accepted_and_stored_as_given(
    database_url: str, runtime: Runtime
) -> None:
    prefix = f"fz{secrets.token_hex(6)}"
    request = _valid_request(
        tenant=prefix + "t" * (200 - len(prefix)),
        idempotency_key="k" * 255,
        source_event_id="e" * 255,
        requested_by="r" * 190,
        method="patch",
        route="/" + "r" * 499,
        max_status_requests=1_000_000,
        max_transport_failures=1,
        result_deadline_seconds=30 * 24 * 3600,
        cancel_deadline_seconds=0.5,
        command={"n": 2**53 - 1, "m": -(2**53) + 1, "f": 1.5e15, "s": "é\U0001f600\n"},
    )
    result = submit_operation(**request, runtime=runtime)
    assert result.outcome is SubmitOutcome.created
    rows, kinds = _written(database_url, prefix)
    assert kinds == ["intent_recorded"]
    (row,) = rows
    assert (row.method, row.cancel_window_seconds) == ("PATCH", 0.5)
    with transaction(database_url) as session:
        hot = session.get(TimerRow, row.operation_id)  # the budget's row (0033)
        assert hot is not None and hot.max_status_requests == 10**6
    assert row.command == request["command"]


storable_numbers = st.one_of(
    st.integers(-EXACT_INTEGER, EXACT_INTEGER),
    st.floats(-float(EXACT_INTEGER), float(EXACT_INTEGER)),
    st.sampled_from([5e-324, -0.0, 1e-300, 0.1, 1.5e15, 9007199254740991.0, -9007199254740991.0]),
)
storable_json = st.recursive(
    st.none() | st.booleans() | storable_numbers | st.text(STORABLE_CHAR, max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(STORABLE_CHAR, max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(command=st.dictionaries(st.text(STORABLE_CHAR, max_size=6), storable_json, max_size=4))
def test_a_stored_command_canonicalises_to_the_bytes_it_was_fingerprinted_with(
    database_url: str, runtime: Runtime, command: dict[str, Any]
) -> None:
    # JSONB turns 1e20 into the integer 100000000000000000000: that is why intake refuses
    # floats beyond ±(2^53 - 1), and what this checks for everything it accepts.
    request = _valid_request(command=command)
    submit_operation(**request, runtime=runtime)
    (row,), _ = _written(database_url, request["tenant"])
    assert canonical_command(row.command) == canonical_command(command)


# The Celery door: the same rules, answered as data, never raised.


def test_the_celery_door_answers_invalid_for_a_hostile_field() -> None:
    answer = submit_from_message(_valid_request(cancel_deadline_seconds=float("inf")))
    assert answer["outcome"] == "invalid"
    assert "cancel_deadline_seconds" in answer["error"]


def test_the_celery_door_names_unknown_keywords_and_records_nothing(database_url: str) -> None:
    request = _valid_request(urgency=5, colour="red")
    answer = submit_from_message(request)
    assert answer == {
        "outcome": "invalid",
        "error": "unknown keyword arguments: colour, urgency",
    }
    assert _written(database_url, request["tenant"]) == ([], [])


def test_the_celery_door_refuses_a_runtime_keyword(database_url: str) -> None:
    request = _valid_request(runtime="anything")
    answer = submit_from_message(request)
    assert answer["outcome"] == "invalid"
    assert "runtime" in answer["error"]
    assert _written(database_url, request["tenant"]) == ([], [])


def test_the_celery_door_names_missing_keywords() -> None:
    answer = submit_from_message({"provider": "sandbox", "command": {}})
    assert answer == {
        "outcome": "invalid",
        "error": "missing keyword arguments: idempotency_key, requested_by, tenant",
    }


def test_the_celery_door_answers_created_for_a_valid_submission(database_url: str) -> None:
    request = _valid_request()
    answer = submit_from_message(request)
    assert answer["outcome"] == "created"
    rows, kinds = _written(database_url, request["tenant"])
    assert [str(row.operation_id) for row in rows] == [answer["operation_id"]]
    assert kinds == ["intent_recorded"]


json_messages = st.dictionaries(
    st.one_of(st.sampled_from([*sorted(HOSTILE), "runtime", "extra"]), st.text(max_size=6)),
    st.one_of(st.none(), st.booleans(), extreme_numbers, any_text, plain_json),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(message=json_messages)
def test_the_celery_door_never_raises_whatever_the_message_holds(message: dict[str, Any]) -> None:
    # Tenants drawn here are never valid-and-fresh with a storable key often enough to matter;
    # any that are accepted publish to the run's isolated queue.
    answer = submit_from_message(message)
    assert answer["outcome"] in {"invalid", *(o.value for o in SubmitOutcome)}
    if answer["outcome"] == "invalid":
        assert isinstance(answer["error"], str) and answer["error"]


# The CLI door: one line on stderr and exit 2, never a traceback.


def _cli(*args: str | bytes) -> CliResult:
    """In this process (tests/cli_runner.py), unless an argument is bytes: a byte that is not
    UTF-8 reaches Python's argv only through a real process (surrogateescape)."""
    if any(isinstance(arg, bytes) for arg in args):
        done = subprocess.run(
            [sys.executable, "-m", "jobwarden.cli.main", *args],
            cwd=REPO,
            env=os.environ.copy(),
            capture_output=True,
            timeout=60,
            check=False,
        )
        shown = tuple(
            a if isinstance(a, str) else a.decode("utf-8", "surrogateescape") for a in args
        )
        return CliResult(shown, done.returncode, done.stdout, done.stderr)
    return run_cli(*(str(arg) for arg in args))


def _one_line_exit_2(done: CliResult, needle: str) -> None:
    stderr = done.stderr
    assert done.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert needle in stderr


CLI_REFUSALS: list[tuple[str, Callable[[], list[str | bytes]], str]] = [
    ("tenant_too_long", lambda: ["--tenant", "t" * 300], "tenant is longer than 200"),
    # A byte that is not UTF-8 reaches Python as a lone surrogate (surrogateescape).
    ("tenant_not_utf8", lambda: ["--tenant", b"t\xff"], "tenant contains a lone surrogate"),
    ("key_too_long", lambda: ["--key", "k" * 300], "idempotency_key is longer than 255"),
]


@pytest.mark.parametrize(
    ("extra", "needle"), [(e, n) for _, e, n in CLI_REFUSALS], ids=[i for i, _, _ in CLI_REFUSALS]
)
def test_the_cli_prints_one_line_and_exits_2_for_an_invalid_field(
    database_url: str, extra: Callable[[], list[str | bytes]], needle: str
) -> None:
    done = _cli("submit", "sandbox", '{"kind": "export"}', "--key", "k1", *extra())
    _one_line_exit_2(done, needle)


def test_the_cli_prints_one_line_and_exits_2_for_a_too_deep_command(database_url: str) -> None:
    deep = '{"x":' * 40 + "{}" + "}" * 40
    done = _cli("submit", "sandbox", deep, "--key", secrets.token_hex(8), "--tenant", "cli-deep")
    _one_line_exit_2(done, "nested deeper than 32")


# Two CLI paths that jobwarden/cli/main.py (not intake) still gets wrong; strict, so a fix shows.


def test_the_cli_keeps_a_long_error_on_one_line(database_url: str) -> None:
    done = _cli("submit", "sandbox", '{"n": 1e20}', "--key", secrets.token_hex(8))
    _one_line_exit_2(done, "outside")


def test_the_cli_refuses_a_command_too_deep_for_the_json_parser(database_url: str) -> None:
    done = _cli("submit", "sandbox", "[" * 100_000, "--key", secrets.token_hex(8))
    _one_line_exit_2(done, "command")
