"""Concurrency keys: the admission and hand-over decisions, as tables."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models.concurrency import (
    Occupancy,
    Waiting,
    admission,
    admits_now,
    admitted_state,
    check_concurrency_key,
    handed_over,
    holds_key,
    key_limit,
    next_to_admit,
)
from jobwarden.models.contracts.contract import ConcurrencySpec
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError, InvalidSubmissionError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.intake.fingerprint import request_fingerprint
from jobwarden.models.states import TERMINAL, OperationState, is_allowed
from tests.unit.factories import NOW, operation, planned

S = OperationState
DAY = timedelta(days=1)


@pytest.mark.parametrize(
    ("holders", "queued", "strictest", "limit", "starts"),
    [
        (0, 0, None, 1, True),  # a free lock
        (1, 0, 1, 1, False),  # the lock is held
        (1, 0, 2, 2, True),  # room for a second
        (2, 0, 2, 2, False),
        (0, 1, None, 1, False),  # room, but somebody is queued first: no overtaking
        (1, 3, 5, 5, False),
        (1, 0, 1, 5, False),  # the holder asked for a lock: a laxer contract waits too
        (1, 0, 5, 1, False),  # this one asks for a lock: it waits for the key to be free
    ],
)
def test_a_submission_starts_only_when_the_key_has_room_and_nobody_waits(
    holders: int, queued: int, strictest: int | None, limit: int, starts: bool
) -> None:
    room = Occupancy(holders=holders, queued=queued, strictest=strictest)
    assert admits_now(room, limit) is starts


def _waiting(limit: int = 1, approval: bool = False) -> Waiting:
    return Waiting(operation_id=uuid.uuid4(), limit=limit, requires_approval=approval)


@pytest.mark.parametrize(
    ("holders", "strictest", "limits", "admitted"),
    [
        (0, None, [1, 1, 1], 1),  # a lock hands over to exactly one
        (1, 1, [1, 1], 0),  # still held (an escalated holder, say)
        (0, None, [3, 3, 3, 3], 3),  # a limit of 3 admits three at once
        (2, 3, [3, 3], 1),
        (0, None, [], 0),
        (0, None, [1, 5, 5], 1),  # the oldest asked for a lock: it runs alone
        (0, None, [5, 1, 5], 1),  # the second asked for a lock: it waits for the first
        (1, 1, [5, 5], 0),  # the holder asked for a lock: nobody joins it
        (1, 5, [1, 5], 0),  # the oldest does not fit: nobody behind it overtakes
    ],
)
def test_the_hand_over_admits_the_oldest_queued_operations_while_each_fits(
    holders: int, strictest: int | None, limits: list[int], admitted: int
) -> None:
    queue = [_waiting(limit) for limit in limits]
    room = Occupancy(holders=holders, queued=len(queue), strictest=strictest)
    assert next_to_admit(room, queue) == queue[:admitted]


@pytest.mark.parametrize("state", list(S))
def test_every_unfinished_state_but_queued_holds_the_key(state: OperationState) -> None:
    # Escalated and every stopped state hold it too: a human decides first.
    assert holds_key(state) is (state not in TERMINAL and state is not S.queued)


@pytest.mark.parametrize(
    ("approval", "state"), [(False, S.create_pending), (True, S.awaiting_approval)]
)
def test_an_admitted_operation_starts_as_a_fresh_submission_of_its_contract_would(
    approval: bool, state: OperationState
) -> None:
    assert admitted_state(approval) is state
    assert is_allowed(S.queued, state)


def test_admission_moves_the_provider_deadlines_by_the_time_spent_queued() -> None:
    queued = operation(S.queued, concurrency_key="deploy:x", concurrency_limit=1)
    later = queued.created_at + timedelta(minutes=7)
    holder = uuid.uuid4()
    p = planned(
        queued,
        admission(queued, to=S.create_pending, after=holder, now=later, approval_window=DAY),
        now=later,
    )
    changes = p.changes
    assert changes["state"] == "create_pending"
    assert changes["create_deadline"] == queued.create_deadline + timedelta(minutes=7)
    assert changes["result_deadline"] == queued.result_deadline + timedelta(minutes=7)
    assert changes["next_poll_at"] == later == changes["dispatched_at"]
    (event,) = p.events
    assert (event.kind, event.from_state, event.to_state) == (
        EventKind.admitted,
        "queued",
        "create_pending",
    )
    assert event.excerpt is not None and event.excerpt["after"] == str(holder)
    assert event.excerpt["waited_seconds"] == 420.0


def test_an_operation_admitted_to_approval_is_due_when_its_approval_window_ends() -> None:
    queued = operation(S.queued, concurrency_key="k", concurrency_limit=1, next_poll_at=None)
    decided = admission(queued, to=S.awaiting_approval, after=None, now=NOW, approval_window=DAY)
    p = planned(queued, decided)
    # Parked for the sweeper (no message now): nothing is due before the window ends.
    assert queued.with_changes(p.changes).next_poll_at == NOW + DAY
    assert queued.with_changes(p.changes).dispatched_at is None
    assert p.next_at is None


def test_an_approval_window_opened_at_admission_ends_by_the_business_deadline() -> None:
    business = NOW + timedelta(hours=1)
    queued = operation(
        S.queued, concurrency_key="k", concurrency_limit=1, business_deadline=business
    )
    decided = admission(queued, to=S.awaiting_approval, after=None, now=NOW, approval_window=DAY)
    assert planned(queued, decided).changes["next_poll_at"] == business


def test_only_a_queued_operation_is_admitted() -> None:
    with pytest.raises(ValueError, match="only a queued operation"):
        admission(
            operation(S.observing), to=S.create_pending, after=None, now=NOW, approval_window=DAY
        )


def test_the_ended_holder_records_whom_its_key_went_to_without_moving() -> None:
    ended = operation(S.succeeded, concurrency_key="deploy:x", concurrency_limit=1)
    nxt = uuid.uuid4()
    p = planned(ended, handed_over(ended, [nxt]))
    (event,) = p.events
    assert event.kind is EventKind.key_handed_over and event.to_state is None
    assert event.excerpt == {"concurrency_key": "deploy:x", "to": [str(nxt)]}
    assert p.changes == {}


@pytest.mark.parametrize(
    "key", ["deploy:payments:production", "a", "env/eu-1.prod", "team@x+y=z", "x" * 200]
)
def test_a_readable_concurrency_key_is_accepted_as_given(key: str) -> None:
    assert check_concurrency_key(key, max_length=200) == key


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (7, "concurrency_key must be a string, got int"),
        ("", "concurrency_key must not be empty"),
        ("x" * 201, "concurrency_key is longer than 200 characters"),
        ("deploy payments", "concurrency_key may hold only"),
        (":leading", "concurrency_key may hold only"),
        ("tab\there", "concurrency_key may hold only"),
        ("null\x00", "concurrency_key may hold only"),
        ("ünïcode", "concurrency_key may hold only"),
    ],
)
def test_a_bad_concurrency_key_is_refused_naming_the_field(value: object, problem: str) -> None:
    with pytest.raises(InvalidSubmissionError, match=problem):
        check_concurrency_key(value, max_length=200)


def test_a_left_out_concurrency_key_is_none() -> None:
    assert check_concurrency_key(None, max_length=200) is None


def test_a_key_the_contract_says_nothing_about_is_a_lock() -> None:
    assert key_limit(None) == 1
    assert key_limit(ConcurrencySpec(limit=4)) == 4


def test_the_concurrency_key_is_part_of_the_fingerprint_and_absent_changes_nothing() -> None:
    parts: dict[str, Any] = {
        "method": "POST",
        "route": "/r",
        "tenant": "t",
        "provider": "p",
        "command": {"a": 1},
    }
    plain = request_fingerprint(**parts)
    assert request_fingerprint(**parts, concurrency_key=None) == plain
    keyed = request_fingerprint(**parts, concurrency_key="deploy:x")
    assert keyed != plain
    assert keyed != request_fingerprint(**parts, concurrency_key="deploy:y")


SANDBOX_TEXT = (Path(__file__).parents[2] / "config" / "providers" / "sandbox.toml").read_text()


def _sandbox_with(tmp_path: Path, section: str) -> Path:
    path = tmp_path / "sandbox.toml"
    # A table goes last; a top-level key must come before the first table.
    text = (
        f"{SANDBOX_TEXT}\n{section}\n" if section.startswith("[") else f"{section}\n{SANDBOX_TEXT}"
    )
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("section", "limit"), [("[concurrency]\nlimit = 3", 3), ("[concurrency]", 1), ("", None)]
)
def test_a_contract_sets_the_limit_of_the_keys_its_operations_name(
    tmp_path: Path, section: str, limit: int | None
) -> None:
    contract = load_contract(_sandbox_with(tmp_path, section))
    assert (contract.concurrency.limit if contract.concurrency else None) == limit


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("[concurrency]\nlimit = 0", "must be"),
        ("[concurrency]\nlimit = 1.5", "whole number"),
        ("[concurrency]\nlimit = 10001", "at most"),
        ("[concurrency]\nlimti = 2", "did you mean 'limit'"),
        ("concurrency = 1", "must be a table"),
    ],
)
def test_a_bad_concurrency_section_is_refused_naming_the_field(
    tmp_path: Path, section: str, problem: str
) -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(_sandbox_with(tmp_path, section))
    assert caught.value.field.startswith("concurrency")
    assert problem in caught.value.problem
