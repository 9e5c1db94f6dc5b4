"""One identity model for every door (issue 33 findings 1 and 2, DESIGN invariant 15): the
author of a decision is an authenticated principal or an explicit break-glass; the
two-person rule counts distinct authenticated principals, none of them the submitter or
the principal a schedule submitted on behalf of. Table-driven and property-based."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.actions import Decided, Record
from jobwarden.models.errors import AnotherApproverNeededError, RefusedInputError
from jobwarden.models.history.chain import ChainedEvent, EventDraft, EventKind
from jobwarden.models.humans.approvals import (
    NOT_COUNTED,
    SAME_APPROVER,
    SELF_APPROVAL,
    GivenApproval,
    decide_approval,
    on_behalf_of,
)
from jobwarden.models.humans.identity import (
    Author,
    AuthorKind,
    as_author,
    break_glass,
    principal_name,
    recorded_author,
    same_principal,
    token_author,
)
from jobwarden.models.operation import Operation
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, operation

HOUR = timedelta(hours=1)


def _waiting(requested_by: str = "alice") -> Operation:
    return operation(
        S.awaiting_approval,
        authorized_by=None,
        requested_by=requested_by,
        created_at=NOW,
        create_deadline=NOW + timedelta(seconds=300),
        result_deadline=NOW + 2 * HOUR,
        next_poll_at=NOW + 24 * HOUR,
    )


def _decide(
    approver: Author,
    *,
    required: int,
    requested_by: str = "alice",
    behalf_of: str | None = None,
    given: tuple[GivenApproval, ...] = (),
) -> Decided:
    op = _waiting(requested_by)
    return decide_approval(
        op,
        fingerprint=op.request_fingerprint,
        approver=approver,
        now=NOW + timedelta(minutes=5),
        valid_for=HOUR,
        waiting_since=NOW,
        window=24 * HOUR,
        required=required,
        given=given,
        behalf_of=behalf_of,
    )


def _given(actor: str, *, authenticated: bool = True) -> GivenApproval:
    return GivenApproval(
        approver=actor,
        fingerprint=_waiting().request_fingerprint,
        expires_at=NOW + HOUR,
        authenticated=authenticated,
    )


# bob's token; the rule's earlier approvals name him by actor only (any token of his).
BOB = token_author("bob", token_id=uuid.uuid4())
GLASS = break_glass("root", "the API is down and the payroll run is due")


@pytest.mark.parametrize(
    ("actor", "name"),
    [
        ("alice", "alice"),
        ("token:alice", "alice"),
        ("human:token:alice", "alice"),
        ("break-glass:alice", "alice"),
        ("human:break-glass:root", "root"),
        ("human:alice", "alice"),
    ],
)
def test_every_spelling_a_door_records_names_one_principal(actor: str, name: str) -> None:
    assert principal_name(actor) == name
    assert same_principal(actor, name)


@pytest.mark.parametrize(
    ("who", "actor", "authenticated"),
    [
        (token_author("bob"), "token:bob", True),
        (break_glass("root", "API down"), "break-glass:root", False),
        (as_author("bob"), "bob", False),
    ],
)
def test_only_a_token_principal_is_authenticated(
    who: Author, actor: str, authenticated: bool
) -> None:
    assert (who.actor, who.authenticated) == (actor, authenticated)


@pytest.mark.parametrize("text", ["token:mallory", "break-glass:root", "", "   "])
def test_text_never_passes_for_a_principal_at_the_python_door(text: str) -> None:
    with pytest.raises(RefusedInputError) as refused:
        as_author(text, "approver")
    assert str(refused.value).startswith("approver: ")


@pytest.mark.parametrize("reason", ["", "  ", "x" * 501, "line\nbreak"])
def test_break_glass_needs_a_reason(reason: str) -> None:
    with pytest.raises(RefusedInputError, match="--break-glass"):
        break_glass("root", reason)


@pytest.mark.parametrize(
    ("actor", "excerpt", "kind"),
    [
        ("token:bob", {}, AuthorKind.token),  # HTTP, MCP and console before this model
        ("bob", {}, AuthorKind.named),  # typed at the CLI before this model
        ("break-glass:root", {}, AuthorKind.break_glass),
        ("bob", {"principal": "token"}, AuthorKind.token),
        ("token:bob", {"principal": "named"}, AuthorKind.named),
    ],
)
def test_a_recorded_approval_is_read_back_as_the_author_it_recorded(
    actor: str, excerpt: dict[str, str], kind: AuthorKind
) -> None:
    assert recorded_author(actor, excerpt).kind is kind


# Who may approve alice's operation (submitted by alice; on behalf of dave where named).
@pytest.mark.parametrize(
    ("approver", "required", "behalf_of", "given", "outcome"),
    [
        # Finding 1: two typed names from one shell never make two people.
        (as_author("mallory"), 2, None, (_given("bob", authenticated=False),), NOT_COUNTED),
        (as_author("mallory"), 2, None, (), NOT_COUNTED),
        # Break-glass never counts toward the rule, first or second.
        (GLASS, 2, None, (), NOT_COUNTED),
        (GLASS, 2, None, (_given("token:bob"),), NOT_COUNTED),
        # ... and alone may approve a one-approval contract (recorded as such).
        (GLASS, 1, None, (), EventKind.approved),
        # Finding 2: the schedule's author never approves what it fired, alone or second.
        (token_author("dave"), 1, "token:dave", (), SELF_APPROVAL),
        (token_author("dave", allows_self_approval=True), 1, "token:dave", (), SELF_APPROVAL),
        (token_author("dave"), 2, "token:dave", (_given("token:bob"),), SELF_APPROVAL),
        (token_author("bob"), 2, "token:dave", (), EventKind.approval_recorded),
        (token_author("carol"), 2, "token:dave", (_given("token:bob"),), EventKind.approved),
        # The submitter, however spelt; for one approval only if the tenant allows it.
        (token_author("alice"), 1, None, (), SELF_APPROVAL),
        (token_author("alice", allows_self_approval=True), 1, None, (), EventKind.approved),
        (token_author("alice", allows_self_approval=True), 2, None, (), SELF_APPROVAL),
        (break_glass("alice", "no token"), 1, None, (), SELF_APPROVAL),
        # One principal twice, though by two tokens of the same name.
        (
            token_author("bob", token_id=uuid.uuid4()),
            2,
            None,
            (_given("token:bob"),),
            SAME_APPROVER,
        ),
        # An approval a typed name recorded earlier does not count: this is a new first.
        (BOB, 2, None, (_given("carol", authenticated=False),), EventKind.approval_recorded),
    ],
)
def test_who_may_approve_is_the_same_rule_for_every_door(
    approver: Author,
    required: int,
    behalf_of: str | None,
    given: tuple[GivenApproval, ...],
    outcome: str | EventKind,
) -> None:
    if isinstance(outcome, EventKind):
        action = _decide(approver, required=required, behalf_of=behalf_of, given=given).action
        assert isinstance(action, Record) and action.event is outcome
        return
    with pytest.raises(AnotherApproverNeededError) as refused:
        _decide(approver, required=required, behalf_of=behalf_of, given=given)
    assert refused.value.reason == outcome


def test_a_break_glass_approval_is_marked_with_its_reason_in_the_event() -> None:
    action = _decide(GLASS, required=1).action
    assert isinstance(action, Record) and action.excerpt is not None
    assert action.excerpt["principal"] == "break-glass"
    assert action.excerpt["break_glass"] == "the API is down and the payroll run is due"


def _event(kind: EventKind, excerpt: dict[str, object] | None) -> ChainedEvent:
    draft = EventDraft(kind=kind, actor="schedule:nightly", at=NOW, excerpt=excerpt)
    return ChainedEvent(operation_id="op", seq=1, draft=draft, prev_hash="", hash="")


@pytest.mark.parametrize(
    ("excerpt", "expected"),
    [({"on_behalf_of": "token:dave"}, "token:dave"), ({}, None), (None, None)],
)
def test_on_behalf_of_is_read_from_the_intent_event(
    excerpt: dict[str, object] | None, expected: str | None
) -> None:
    assert on_behalf_of([_event(EventKind.intent_recorded, excerpt)]) == expected


NAMES = st.sampled_from(["alice", "bob", "carol", "dave", "mallory"])
AUTHORS = st.one_of(
    st.builds(token_author, NAMES),
    st.builds(lambda n: token_author(n, allows_self_approval=True), NAMES),
    st.builds(lambda n: break_glass(n, "emergency"), NAMES),
    st.builds(as_author, NAMES),
)


@settings(max_examples=300, deadline=None)
@given(
    attempts=st.lists(AUTHORS, max_size=8),
    submitter=st.sampled_from(["alice", "token:alice"]),
    behalf_of=st.sampled_from([None, "token:dave", "dave"]),
)
def test_two_person_rule_is_met_only_by_two_distinct_token_holders_other_than_the_submitter(
    attempts: list[Author], submitter: str, behalf_of: str | None
) -> None:
    given_so_far: list[GivenApproval] = []
    for who in attempts:
        try:
            decided = _decide(
                who,
                required=2,
                requested_by=submitter,
                behalf_of=behalf_of,
                given=tuple(given_so_far),
            )
        except AnotherApproverNeededError:
            continue
        action = decided.action
        assert isinstance(action, Record)
        if action.event is EventKind.approval_recorded:
            given_so_far.append(_given(who.actor, authenticated=who.authenticated))
            continue
        assert action.event is EventKind.approved and action.excerpt is not None
        approvers = action.excerpt["approvers"]
        names = {principal_name(a) for a in approvers}
        excluded = {"alice"} | ({principal_name(behalf_of)} if behalf_of else set())
        assert len(names) == 2 and not names & excluded
        assert all(a.startswith("token:") for a in approvers)
        return
