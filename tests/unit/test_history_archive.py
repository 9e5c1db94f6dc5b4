"""Archived history segments and which months may leave the database (pure)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.history.archive import (
    HeldOperation,
    Partition,
    SegmentError,
    archive_refusal,
    decode_segment,
    due_for_archive,
    encode_segment,
    month_start,
    months_ahead,
    next_month,
    partition_name,
    segment_key,
)
from jobwarden.models.history.chain import GENESIS_HASH, EventDraft, EventKind, chain
from jobwarden.models.history.verification import verify_chain

OP = str(uuid.UUID(int=7))
AT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


def _history(excerpts: list[Any]) -> list[Any]:
    drafts = [
        EventDraft(
            kind=EventKind.polled,
            actor="worker:é",
            at=AT + timedelta(seconds=i),
            http_status=200,
            excerpt={"answer": e},
        )
        for i, e in enumerate(excerpts)
    ]
    return [
        ev.stored()
        for ev in chain(OP, drafts, last_seq=0, last_hash=GENESIS_HASH, row_digest="d" * 64)
    ]


@settings(max_examples=60, deadline=None)
@given(st.lists(json_values, min_size=1, max_size=5))
def test_a_segment_decodes_to_the_events_it_encoded_and_their_chain_still_verifies(
    excerpts: list[Any],
) -> None:
    events = _history(excerpts)
    data = encode_segment(OP, events)
    back = decode_segment(OP, data)
    assert back == events
    assert encode_segment(OP, back) == data  # the same events always give the same bytes
    assert verify_chain(OP, back, head_seq=len(events), head_hash=events[-1].hash) == []


def test_a_segment_is_one_json_line_per_event_whatever_line_breaks_its_strings_hold() -> None:
    events = _history([1, "two\u2028lines\x1c", None])
    data = encode_segment(OP, events)
    assert data.count(b"\n") == 3 and data.endswith(b"\n")
    assert decode_segment(OP, data) == events


def test_an_edited_event_in_a_segment_is_named_by_verification() -> None:
    events = _history([1, 2, 3])
    data = encode_segment(OP, events).replace(b'"answer":2', b'"answer":20')
    problems = verify_chain(OP, decode_segment(OP, data), head_seq=3, head_hash=events[-1].hash)
    assert [(p.seq, p.problem) for p in problems] == [(2, "hash does not match contents")]


def test_a_segment_missing_its_last_line_no_longer_reaches_the_head() -> None:
    events = _history([1, 2, 3])
    data = b"".join(line + b"\n" for line in encode_segment(OP, events).split(b"\n")[:2])
    problems = verify_chain(OP, decode_segment(OP, data), head_seq=3, head_hash=events[-1].hash)
    assert [p.problem for p in problems] == ["chain head does not match the operation row"]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"\xff\n", "not UTF-8"),
        (b'{"seq": 1}', "cut short"),
        (b"{not json\n", "line 1: not JSON"),
        (b'{"seq": 1}\n', "line 1: not an event line"),
    ],
)
def test_a_damaged_segment_is_refused_naming_the_line(data: bytes, says: str) -> None:
    with pytest.raises(SegmentError, match=says):
        decode_segment(OP, data)


def test_a_segment_of_another_operation_is_refused() -> None:
    data = encode_segment(OP, _history([1]))
    with pytest.raises(SegmentError, match=f"not {uuid.UUID(int=8)}"):
        decode_segment(str(uuid.UUID(int=8)), data)


def test_a_line_with_a_field_of_the_wrong_type_is_refused() -> None:
    data = encode_segment(OP, _history([1])).replace(b'"seq":1', b'"seq":"1"')
    with pytest.raises(SegmentError, match="line 1: a field is missing or of the wrong type"):
        decode_segment(OP, data)


def test_months_and_partition_names_are_in_utc() -> None:
    late = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)
    assert partition_name(late) == "operation_events_202612"
    assert month_start(late) == datetime(2026, 12, 1, tzinfo=UTC)
    assert next_month(month_start(late)) == datetime(2027, 1, 1, tzinfo=UTC)
    assert [partition_name(m) for m in months_ahead(late)] == [
        "operation_events_202612",
        "operation_events_202701",
        "operation_events_202702",
    ]


def test_a_month_is_due_only_once_its_whole_range_is_before_the_cutoff() -> None:
    low = datetime(2026, 1, 1, tzinfo=UTC)
    month = Partition(name="operation_events_202601", low=low, high=next_month(low), rows=3)
    default = Partition(name="operation_events_default", low=None, high=None, rows=3)
    assert due_for_archive(month, datetime(2026, 2, 1, tzinfo=UTC))
    assert not due_for_archive(month, datetime(2026, 1, 31, tzinfo=UTC))
    assert not due_for_archive(default, datetime(2099, 1, 1, tzinfo=UTC))


def _held(state: str, updated: datetime) -> HeldOperation:
    return HeldOperation(
        operation_id=uuid.UUID(int=9),
        state=state,
        updated_at=updated,
        event_count=2,
        last_event_hash="h" * 64,
    )


def test_a_month_holding_an_operation_not_ended_or_written_lately_is_refused_naming_it() -> None:
    cutoff = datetime(2026, 6, 1, tzinfo=UTC)
    early = cutoff - timedelta(days=1)
    assert archive_refusal("p", [_held("succeeded", early)], cutoff) is None
    running = archive_refusal("p", [_held("observing", early)], cutoff)
    assert running == (
        f"partition p holds operation {uuid.UUID(int=9)}, which has not ended (state observing)"
    )
    late = archive_refusal("p", [_held("failed", cutoff + timedelta(seconds=1))], cutoff)
    assert late is not None and "after the cutoff" in late


def test_a_segment_key_names_its_partition_operation_and_event_count() -> None:
    key = segment_key("operation_events_202601", uuid.UUID(int=1), 12)
    assert key == f"history/operation_events_202601/{uuid.UUID(int=1)}-12.jsonl"
