"""Reserved key namespaces (models/intake/reserved_keys.py, invariant 17) and the audit's
judgement of stored keys (models/intake/key_audit.py): pure, table-driven."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.intake.key_audit import KeyedOperation, planted_reason
from jobwarden.models.intake.reserved_keys import (
    RESERVED,
    ReservedKeyError,
    check_caller_key,
    reserved_namespace,
)
from jobwarden.models.intake.resubmission import KEY_PREFIX as RESUBMIT_PREFIX
from jobwarden.models.intake.submission import FieldLimits, SubmissionRequest
from jobwarden.models.schedules.slots import KEY_PREFIX as SCHEDULE_PREFIX
from jobwarden.models.schedules.slots import slot_key

OLD = uuid.UUID("0b5e1c4e-0000-4000-8000-000000000000")
SLOT = datetime(2026, 1, 1, tzinfo=UTC)
LIMITS = FieldLimits(
    tenant=200,
    provider=200,
    idempotency_key=255,
    source_event_id=255,
    requested_by=200,
    method=10,
    route=500,
)


@pytest.mark.parametrize(
    ("key", "prefix"),
    [
        (f"resubmit:{OLD}", "resubmit:"),
        ("RESUBMIT:x", "resubmit:"),
        ("schedule:nightly:2026-01-01T00:00:00Z", "schedule:"),
        ("Schedule:", "schedule:"),
        ("follow-up:capture-1", "follow-up:"),
        ("jobwarden:later", "jobwarden:"),
        ("order-1042", None),
        ("resubmit", None),
        (" resubmit:x", None),
        ("my-resubmit:x", None),
        ("schedules:x", None),
    ],
)
def test_a_key_is_reserved_exactly_when_it_starts_with_a_reserved_prefix(
    key: str, prefix: str | None
) -> None:
    found = reserved_namespace(key)
    assert (found.prefix if found else None) == prefix


def test_the_keys_jobwarden_derives_all_lie_in_reserved_namespaces() -> None:
    assert reserved_namespace(f"{RESUBMIT_PREFIX}{OLD}") is not None
    assert reserved_namespace(slot_key("nightly", SLOT)) is not None
    assert {RESUBMIT_PREFIX, SCHEDULE_PREFIX} <= {n.prefix for n in RESERVED}


def test_no_reserved_prefix_holds_a_like_wildcard_or_an_upper_case_letter() -> None:
    # models/persistence/key_store.py matches lower(key) LIKE '<prefix>%'.
    for namespace in RESERVED:
        assert not {"%", "_", "\\"} & set(namespace.prefix)
        assert namespace.prefix == namespace.prefix.casefold()


def test_a_refused_key_names_the_field_its_namespace_and_what_derives_keys_there() -> None:
    with pytest.raises(ReservedKeyError) as refused:
        check_caller_key(f"resubmit:{OLD}")
    assert str(refused.value) == (
        "idempotency_key must not start with 'resubmit:': that namespace is reserved for "
        "keys jobwarden derives (a person's resubmission); reserved: 'resubmit:', "
        "'schedule:', 'follow-up:', 'jobwarden:'"
    )
    assert refused.value.field == "idempotency_key"


@given(st.text(max_size=40))
def test_a_key_outside_the_namespaces_passes_unchanged(key: str) -> None:
    if reserved_namespace(key) is None:
        assert check_caller_key(key) == key
    else:
        with pytest.raises(ReservedKeyError):
            check_caller_key(key)


def test_only_a_derived_submission_may_use_a_reserved_key() -> None:
    request = SubmissionRequest(
        tenant="acme",
        requested_by="svc",
        provider="sandbox",
        command={},
        idempotency_key=slot_key("nightly", SLOT),
    )
    with pytest.raises(ReservedKeyError):
        request.check(limits=LIMITS, providers={"sandbox"})
    checked = request.check(limits=LIMITS, providers={"sandbox"}, derived_key=True)
    assert checked.idempotency_key == "schedule:nightly:2026-01-01T00:00:00Z"


def _op(
    key: str, *, resubmit_of: uuid.UUID | None = None, slot: tuple[str, datetime] | None = None
) -> KeyedOperation:
    return KeyedOperation(
        operation_id=uuid.uuid4(),
        tenant="acme",
        idempotency_key=key,
        created_at=SLOT,
        resubmit_of=resubmit_of,
        slot=slot,
        door="http",
        actor="token:mallory",
    )


@pytest.mark.parametrize(
    ("op", "reason"),
    [
        (_op(f"resubmit:{OLD}", resubmit_of=OLD), None),
        (_op(f"resubmit:{OLD}"), "no resubmission links it to an operation it replaces"),
        (
            _op(f"resubmit:{OLD}", resubmit_of=uuid.UUID(int=1)),
            "its key does not name the operation it replaces "
            "(00000000-0000-0000-0000-000000000001)",
        ),
        (_op(slot_key("nightly", SLOT), slot=("nightly", SLOT)), None),
        (_op(slot_key("nightly", SLOT)), "no schedule slot names it"),
        (
            _op(slot_key("nightly", SLOT), slot=("hourly", SLOT)),
            "its key does not name the slot that fired it (schedule:hourly:2026-01-01T00:00:00Z)",
        ),
        (_op("follow-up:x"), "jobwarden derives no keys under 'follow-up:' yet"),
        (_op("jobwarden:x"), "jobwarden derives no keys under 'jobwarden:' yet"),
        (_op("order-1042"), None),
    ],
)
def test_a_stored_key_is_planted_unless_the_link_its_derivation_records_names_it(
    op: KeyedOperation, reason: str | None
) -> None:
    assert planted_reason(op) == reason
