"""Fingerprints bind a key to one request; the event chain shows any edit."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.fingerprint import canonical_command, request_fingerprint
from jobwarden.models.history import GENESIS_HASH, EventDraft, EventKind, chain, verify_chain

BASE = {"method": "POST", "route": "/r", "tenant": "t", "provider": "p"}
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.text(max_size=8)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), json_values, max_size=6))
def test_the_fingerprint_ignores_key_order(command: dict[str, object]) -> None:
    reordered = dict(reversed(list(command.items())))
    assert request_fingerprint(**BASE, command=command) == request_fingerprint(
        **BASE, command=reordered
    )


def test_numbers_are_canonical_so_1_and_1_point_0_are_the_same_request() -> None:
    assert canonical_command({"n": 1.0}) == canonical_command({"n": 1}) == b'{"n":1}'


@pytest.mark.parametrize("field", ["method", "route", "tenant", "provider"])
def test_every_part_of_the_request_changes_the_fingerprint(field: str) -> None:
    other = {**BASE, field: BASE[field] + "x"}
    assert request_fingerprint(**BASE, command={"a": 1}) != request_fingerprint(
        **other, command={"a": 1}
    )


def test_method_case_does_not_matter() -> None:
    assert request_fingerprint(**{**BASE, "method": "post"}, command={}) == request_fingerprint(
        **BASE, command={}
    )


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ([1], "JSON object"),
        ({"x": float("inf")}, "finite"),
        ({"x": {1: 2}}, "keys must be strings"),
        ({"x": {1, 2}}, "not JSON"),
        ({"x": 2**53}, "2^53 - 1"),
    ],
)
def test_commands_that_are_not_exact_json_are_refused(command: object, message: str) -> None:
    with pytest.raises(InvalidSubmissionError, match=message.replace("^", r"\^")):
        canonical_command(command)


def test_deep_nesting_is_refused() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(40):
        node["x"] = {}
        node = node["x"]  # type: ignore[assignment]
    with pytest.raises(InvalidSubmissionError, match="nested deeper"):
        canonical_command(deep)


T0 = datetime(2026, 11, 30, 10, tzinfo=UTC)


def drafts(n: int) -> list[EventDraft]:
    return [
        EventDraft(
            kind=EventKind.observed,
            actor="w",
            at=T0 + timedelta(seconds=i),
            http_status=200,
            excerpt={"i": i},
        )
        for i in range(n)
    ]


def test_an_untouched_chain_verifies_and_continues_from_its_head() -> None:
    first = chain("op", drafts(3), last_seq=0, last_hash=GENESIS_HASH)
    more = chain("op", drafts(2), last_seq=first[-1].seq, last_hash=first[-1].hash)
    events = first + more
    assert [e.seq for e in events] == [1, 2, 3, 4, 5]
    assert verify_chain("op", events, head_seq=5, head_hash=events[-1].hash) == []


@given(st.integers(0, 4), st.sampled_from(["edit", "delete", "swap", "other_operation"]))
def test_any_edit_deletion_or_reordering_is_reported(index: int, tamper: str) -> None:
    events = chain("op", drafts(5), last_seq=0, last_hash=GENESIS_HASH)
    head = events[-1]
    if tamper == "edit":
        ev = events[index]
        events[index] = replace(ev, draft=replace(ev.draft, http_status=500))
    elif tamper == "delete":
        del events[index]
    elif tamper == "swap":
        j = (index + 1) % 5
        events[index], events[j] = events[j], events[index]
    problems = verify_chain(
        "other" if tamper == "other_operation" else "op",
        events,
        head_seq=head.seq,
        head_hash=head.hash,
    )
    assert problems


def test_a_row_whose_head_does_not_match_its_events_is_reported() -> None:
    events = chain("op", drafts(2), last_seq=0, last_hash=GENESIS_HASH)
    problems = verify_chain("op", events, head_seq=3, head_hash=events[-1].hash)
    assert [p.problem for p in problems] == ["chain head does not match the operation row"]
