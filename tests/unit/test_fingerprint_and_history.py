"""Fingerprints bind a key to one request; the event chain shows any edit."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.history.chain import (
    GENESIS_HASH,
    ChainedEvent,
    EventDraft,
    EventKind,
    StoredEvent,
    chain,
    draft_fields,
)
from jobwarden.models.history.hash_form import NUMBER_TAG, canonical, exact_decimal, hashable
from jobwarden.models.history.row_facts import (
    LATER_FACTS,
    ROW_FACTS,
    UNBOUND_COLUMNS,
    _fact,
    row_digest,
)
from jobwarden.models.history.verification import check_result, row_bound, verify_chain
from jobwarden.models.intake.fingerprint import canonical_command, request_fingerprint
from jobwarden.models.operation import COLUMNS
from jobwarden.models.states import OperationState as S
from tests.unit import factories

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


# --- numbers hash alike before and after the JSONB round trip -----------------------------


def jsonb_round_trip(value: object) -> object:
    """What Postgres hands back for ``value`` stored as JSONB: numeric text, read by json.

    JSONB keeps a number as numeric and prints it in plain notation with its scale
    (1e20 -> 100000000000000000000, 1.5e-300 -> 0.000...15, 1.0 -> 1.0).
    """
    text = json.dumps(value)
    return json.loads(text, parse_float=lambda s: json.loads(format(Decimal(s), "f")))


BIG = [2**64, -(2**63), 2**53, -(2**53), 10**300, 1e300, 1e20, 1e16, 2.0**53, -1e300, 1.8e308]
SMALL = [0.1, 1.5e-300, 5e-324, 1.0, -0.0, 2**53 - 1, -(2**53) + 1, 3, 0.5, 1e15]


@pytest.mark.parametrize("number", BIG + SMALL, ids=repr)
def test_a_number_hashes_the_same_after_postgres_reads_it_back(number: float) -> None:
    stored = jsonb_round_trip({"n": number})
    assert canonical(stored) == canonical({"n": number})


@pytest.mark.parametrize(
    ("a", "b"),
    [(1e300, 10**300), (1e20, 10**20), (1e16, 10**16), (2.0**64, 18446744073709552000)],
    ids=repr,
)
def test_a_big_float_and_the_integer_jsonb_returns_for_it_share_one_exact_decimal(
    a: float, b: int
) -> None:
    assert exact_decimal(a) == exact_decimal(b)
    assert hashable(a) == hashable(b) == NUMBER_TAG + exact_decimal(b)


def test_exact_decimals_are_exact_so_neighbouring_big_integers_differ() -> None:
    assert exact_decimal(2**64) == "18446744073709551616e0"
    assert exact_decimal(2**64 + 1) != exact_decimal(2**64)
    assert exact_decimal(-(2**63)) == "-9223372036854775808e0"
    assert exact_decimal(10**300) == "1e300"
    assert exact_decimal(123 * 10**40 + 1) == "123" + "0" * 39 + "1e0"
    # Beyond str()'s 4300-digit guard, still exact and still no exception.
    assert exact_decimal(10**5000 + 7).endswith("7e0")


def test_numbers_rfc8785_holds_exactly_are_left_alone_so_older_chains_hash_as_before() -> None:
    value: dict[str, Any] = {
        "a": [0.1, 1.5e-300, 2**53 - 1, -(2**53) + 1, True, None, "x"],
        "b": {"c": 1.0},
    }
    assert hashable(value) == value
    assert canonical(value) == rfc8785.dumps(value)


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf], ids=repr)
def test_non_finite_floats_get_a_tag_of_their_own_instead_of_an_error(number: float) -> None:
    tagged = hashable(number)
    assert isinstance(tagged, str) and tagged.startswith(NUMBER_TAG)
    assert canonical({"n": number}) != canonical({"n": 0})


def test_a_tag_cannot_collide_with_a_string_postgres_can_store() -> None:
    # Text and JSONB refuse NUL, so a stored string never spells a tag.
    assert "\x00" in NUMBER_TAG
    assert canonical({"n": 2**64}) != canonical({"n": "18446744073709551616e0"})


def test_values_json_cannot_hold_are_refused_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a JSON value: set"):
        canonical({"x": {1, 2}})


safe_or_big_numbers = (
    st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.integers(-(2**70), 2**70).map(lambda n: n * 10**20)
)
jsonable = st.recursive(
    st.none() | st.booleans() | st.text(max_size=6) | safe_or_big_numbers,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=6), jsonable, max_size=6))
def test_any_json_value_hashes_the_same_after_the_jsonb_round_trip(value: dict[str, Any]) -> None:
    assert canonical(jsonb_round_trip(value)) == canonical(value)


def test_an_event_holding_big_numbers_chains_and_verifies_after_the_round_trip() -> None:
    body = {"id": 2**64, "min": -(2**63), "big": 1e300, "mid": 1e20, "small": 1.5e-300}
    draft = EventDraft(kind=EventKind.observed, actor="w", at=T0, excerpt=body)
    (ev,) = chain("op", [draft], last_seq=0, last_hash=GENESIS_HASH, row_digest="d" * 64)
    read_back = StoredEvent(
        seq=1,
        fields={**draft_fields(draft), "excerpt": jsonb_round_trip(body)},
        prev_hash=ev.prev_hash,
        hash=ev.hash,
        row_digest=ev.row_digest,
    )
    assert verify_chain("op", [read_back], head_seq=1, head_hash=ev.hash) == []


def test_an_event_hashed_before_numbers_were_tagged_still_verifies() -> None:
    # Older chains hashed 1e20 the way RFC 8785 spells a float; JSONB returns it as an int.
    fields = draft_fields(
        EventDraft(kind=EventKind.observed, actor="w", at=T0, excerpt={"n": 1e20, "m": 1e300})
    )
    material = {"operation_id": "op", "seq": 1, "prev_hash": GENESIS_HASH, **fields}
    old_hash = hashlib.sha256(rfc8785.dumps(material)).hexdigest()
    read_back = StoredEvent(
        seq=1,
        fields={**fields, "excerpt": {"n": 10**20, "m": 10**300}},
        prev_hash=GENESIS_HASH,
        hash=old_hash,
    )
    assert verify_chain("op", [read_back], head_seq=1, head_hash=old_hash) == []


# --- the chain covers the operations row and the result bytes ---------------------------------


def _facts(**changes: Any) -> dict[str, Any]:
    op = factories.operation(**changes)
    return {name: getattr(op, name) for name in ROW_FACTS}


def test_every_operations_column_is_bound_or_named_as_unbound_with_a_reason() -> None:
    assert set(ROW_FACTS) | UNBOUND_COLUMNS == COLUMNS
    assert not set(ROW_FACTS) & UNBOUND_COLUMNS


EDITS: dict[str, Any] = {
    "tenant": "t2",
    "provider": "other",
    "idempotency_key": "k2",
    "source_event_id": "e2",
    "provider_token": "jw-other",
    "request_fingerprint": "e" * 64,
    "method": "PUT",
    "route": "/other",
    "command": {"a": 2},
    "trace_id": "b" * 32,
    "requested_by": "mallory",
    "authorized_by": "mallory",
    "approval_expires_at": T0,
    "created_at": T0,
    "state": S.succeeded,
    "remote_job_id": "job_2",
    "status_url": "http://127.0.0.1:8765/v1/jobs/job_2",
    "accepted_at": T0,
    "result_reference": "http://127.0.0.1:8765/r2",
    "validation_summary": {"valid": True},
    "escalation_reason": "rate_limited",
    "escalation_detail": "edited",
    "cancel_requested_by": "mallory",
    "cancel_reason": "edited",
    "create_deadline": T0,
    "result_deadline": T0,
    "cancel_deadline": T0,
    "cancel_window_seconds": 1.5,
    "create_attempts": 7,
    "status_requests_used": 7,
    "max_status_requests": 700,
    "transport_failures_used": 7,
    "max_transport_failures": 700,
    "extensions_used": 7,
    "step_failures": 2,
    "result_fetch_attempts": 7,
    "collect_deadline": T0,
    "first_sent_at": T0,
    "business_deadline": T0,
    "concurrency_key": "deploy:x",
    "concurrency_limit": 2,
    "polling_mode": "location",
    "resubmit_of": "0b6f3c58-8f0a-4d3e-9a51-6c1f1a2b3c4d",
    "resubmitted_as": "1c7a4d69-9a1b-4e4f-8b62-7d2a2b3c4d5e",
    "ended_as": "failed",
    "cleanup_deadline": T0,
    "approved_request_digest": "d" * 64,
    "contract_digest": "ab" * 32,
    "held_by": "2d8b5e7a-0b2c-4f5a-9c73-8e3b3c4d5e6f",
    "cancel_during_pause_by": "mallory",
    "follows": "5d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6",
    "follow_up_kind": "refund",
    "follow_up_amount": 500,
}


def test_every_bound_fact_has_an_edit_below() -> None:
    assert set(EDITS) == set(ROW_FACTS)


@pytest.mark.parametrize("field", sorted(EDITS))
def test_editing_any_bound_fact_changes_the_row_digest(field: str) -> None:
    assert row_digest(_facts()) != row_digest(_facts(**{field: EDITS[field]}))


def test_the_row_digest_reads_values_the_way_postgres_returns_them() -> None:
    written = _facts(
        state=S.accepted, cancel_window_seconds=30, max_status_requests=12.0, created_at=T0
    )
    read_back = _facts(
        state="accepted",
        cancel_window_seconds=30.0,
        max_status_requests=12,
        created_at=T0.astimezone(timezone(timedelta(hours=2))),
    )
    assert row_digest(written) == row_digest(read_back)
    big = _facts(command={"n": 1e20, "m": 2**64})
    assert row_digest(big) == row_digest(_facts(command=jsonb_round_trip(big["command"])))


def _bound_chain(facts: dict[str, Any], n: int = 3) -> list[ChainedEvent]:
    return chain("op", drafts(n), last_seq=0, last_hash=GENESIS_HASH, row_digest=row_digest(facts))


def test_a_chain_whose_head_recorded_the_live_row_verifies() -> None:
    facts = _facts()
    events = _bound_chain(facts)
    assert [e.row_digest is not None for e in events] == [False, False, True]
    assert verify_chain("op", events, head_seq=3, head_hash=events[-1].hash, row=facts) == []


def test_a_row_edited_after_its_head_was_written_is_reported_naming_the_state() -> None:
    facts = _facts()
    events = chain(
        "op",
        [EventDraft(kind=EventKind.decision, actor="w", at=T0, to_state="create_pending")],
        last_seq=0,
        last_hash=GENESIS_HASH,
        row_digest=row_digest(facts),
    )
    problems = verify_chain(
        "op", events, head_seq=1, head_hash=events[-1].hash, row={**facts, "state": "succeeded"}
    )
    assert [(p.seq, p.problem) for p in problems] == [
        (
            1,
            "operations row differs from the row this event recorded "
            "(state is succeeded, the history ends in create_pending)",
        )
    ]


def test_an_empty_history_is_a_problem_not_a_verified_chain() -> None:
    problems = verify_chain("op", [], head_seq=0, head_hash=GENESIS_HASH, row=_facts())
    assert [p.problem for p in problems] == ["no events: the history is empty"]


def test_a_history_from_before_row_digests_verifies_without_binding_the_row() -> None:
    events = chain("op", drafts(2), last_seq=0, last_hash=GENESIS_HASH)
    facts = _facts()
    assert verify_chain("op", events, head_seq=2, head_hash=events[-1].hash, row=facts) == []
    assert not row_bound(events)


def test_a_head_without_a_digest_after_bound_writes_is_a_cut_chain() -> None:
    facts = _facts()
    first = _bound_chain(facts, 2)
    more = chain("op", drafts(2), last_seq=2, last_hash=first[-1].hash, row_digest="a" * 64)
    cut = [*first, more[0]]  # the tail of the second write removed, the head set back
    problems = verify_chain("op", cut, head_seq=3, head_hash=cut[-1].hash, row=facts)
    assert [p.seq for p in problems] == [3]
    assert "no row digest" in problems[0].problem


def test_an_unknown_kind_is_reported_not_raised() -> None:
    (ev,) = chain("op", drafts(1), last_seq=0, last_hash=GENESIS_HASH)
    edited = replace(ev.stored(), fields={**ev.stored().fields, "kind": "bogus"})
    problems = verify_chain("op", [edited], head_seq=1, head_hash=ev.hash)
    assert [(p.seq, p.problem) for p in problems] == [(1, "hash does not match contents")]


def _collected(content: bytes) -> list[ChainedEvent]:
    digest = hashlib.sha256(content).hexdigest()
    summary = {"valid": True, "sha256": digest, "size_bytes": len(content)}
    draft = EventDraft(kind=EventKind.result_collected, actor="w", at=T0, excerpt=summary)
    return chain("op", [draft], last_seq=0, last_hash=GENESIS_HASH)


def test_stored_result_bytes_matching_the_recorded_digest_pass() -> None:
    content = b'{"ok": true}'
    sha = hashlib.sha256(content).hexdigest()
    assert check_result(_collected(content), content=content, sha256=sha, size_bytes=12) == []
    assert check_result(drafts_chained(), content=None, sha256=None, size_bytes=None) == []


def drafts_chained() -> list[ChainedEvent]:
    return chain("op", drafts(2), last_seq=0, last_hash=GENESIS_HASH)


@pytest.mark.parametrize(
    ("stored", "expected"),
    [
        ("replaced_bytes", ["stored result bytes do not match their sha256"]),
        (
            "replaced_bytes_and_sha256",
            [
                "stored result sha256 differs from the digest this event recorded",
                "stored result is 6 bytes; 12 were recorded",
            ],
        ),
        ("deleted", ["the result bytes it recorded are missing"]),
    ],
)
def test_replaced_or_missing_result_bytes_are_named(stored: str, expected: list[str]) -> None:
    original = b'{"ok": true}'
    events = _collected(original)
    sha = hashlib.sha256(original).hexdigest()
    other = b"forged"
    content: bytes | None = {"replaced_bytes": b'{"ok": fals}', "deleted": None}.get(stored, other)
    stored_sha = hashlib.sha256(other).hexdigest() if stored == "replaced_bytes_and_sha256" else sha
    size = len(content) if content is not None else None
    problems = check_result(events, content=content, sha256=stored_sha, size_bytes=size)
    assert [p.problem for p in problems] == expected


def test_result_bytes_no_event_records_are_named() -> None:
    problems = check_result(drafts_chained(), content=b"x", sha256="0" * 64, size_bytes=1)
    assert [p.problem for p in problems] == [
        "result bytes are stored, but no result_collected event records them"
    ]


def test_a_row_digested_before_the_authorized_by_rename_still_digests_alike() -> None:
    # 0014 renamed the column; the digest keeps the fact's old name, so the row digest
    # every event written before the rename committed to is still what the row gives.
    facts = _facts()
    material = {
        ("authorised_by" if name == "authorized_by" else name): _fact(kind, facts[name])
        for name, kind in ROW_FACTS.items()
        if facts[name] is not None or name not in LATER_FACTS
    }
    assert row_digest(facts) == hashlib.sha256(canonical(material)).hexdigest()
    assert row_digest({**facts, "authorized_by": "mallory"}) != row_digest(facts)
