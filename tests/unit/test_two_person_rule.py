"""The two-person rule (issue 20): where a contract says ``approvals_required = 2``, two
distinct people approve, neither the submitter; the first approval is recorded and the
operation keeps waiting, the second (same fingerprint, the first unexpired) moves it on."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from jobwarden.models.actions import Decided, Record
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import AnotherApproverNeededError, ContractError
from jobwarden.models.history.chain import ChainedEvent, EventDraft, EventKind
from jobwarden.models.humans.approvals import (
    SAME_APPROVER,
    SELF_APPROVAL,
    GivenApproval,
    decide_approval,
    given_approvals,
    same_person,
)
from jobwarden.models.humans.identity import Author, AuthorKind, token_author
from jobwarden.models.operation import Operation
from jobwarden.models.states import OperationState
from tests.unit.factories import NOW, operation, planned, walked

S = OperationState
REPO = Path(__file__).resolve().parents[2]
DAY = timedelta(days=1)
HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)


def _waiting(**overrides: object) -> Operation:
    """Submitted by alice at NOW (create deadline 300 s), waiting for approval for a day."""
    values: dict[str, object] = {
        "authorized_by": None,
        "requested_by": "alice",
        "created_at": NOW,
        "create_deadline": NOW + timedelta(seconds=300),
        "result_deadline": NOW + timedelta(hours=2),
        "next_poll_at": NOW + DAY,
    }
    return operation(S.awaiting_approval, **{**values, **overrides})


def _given(
    approver: str, *, expires: timedelta = HOUR, fingerprint: str | None = None
) -> GivenApproval:
    return GivenApproval(
        approver=approver,
        fingerprint=fingerprint or _waiting().request_fingerprint,
        expires_at=NOW + expires,
    )


def _approve(
    approver: Author | str, given: tuple[GivenApproval, ...] = (), *, at: timedelta = 10 * MINUTE
) -> Decided:
    op = _waiting()
    return decide_approval(
        op,
        fingerprint=op.request_fingerprint,
        approver=approver,
        now=NOW + at,
        valid_for=HOUR,
        waiting_since=NOW,
        window=DAY,
        required=2,
        given=given,
    )


def test_the_first_of_two_approvals_is_recorded_and_the_operation_keeps_waiting() -> None:
    op = _waiting()
    decided = _approve("token:bob")
    p = planned(op, decided, now=NOW + 10 * MINUTE)
    (event,) = p.events
    assert event.kind is EventKind.approval_recorded and event.to_state is None
    assert event.excerpt == {
        "principal": "token",
        "approver": "token:bob",
        "fingerprint": op.request_fingerprint,
        "expires_at": (NOW + 10 * MINUTE + HOUR).isoformat(),
        "approvals_required": 2,
    }
    # Nothing moves yet: not the state, not the window's timer, not the deadlines.
    assert p.changes == {} and p.next_at is None and walked(S.awaiting_approval, p) == []


def test_a_second_approver_approves_naming_both_and_starts_the_create_deadline() -> None:
    op = _waiting()
    decided = _approve("token:carol", (_given("token:bob"),), at=20 * MINUTE)
    p = planned(op, decided, now=NOW + 20 * MINUTE)
    assert walked(S.awaiting_approval, p) == [S.create_pending]
    assert p.changes["authorized_by"] == "token:bob, token:carol"
    # The create deadline starts at the second approval, the one that lets it be sent.
    assert p.changes["create_deadline"] == NOW + 20 * MINUTE + timedelta(seconds=300)
    (event,) = p.events
    assert event.kind is EventKind.approved
    assert event.excerpt is not None and event.excerpt["approvers"] == ["token:bob", "token:carol"]


@pytest.mark.parametrize(
    ("first_expires", "expires"),
    [
        # The first approval expires before the second would: the earlier of both.
        (30 * MINUTE, 30 * MINUTE),
        (2 * HOUR, 20 * MINUTE + HOUR),
    ],
)
def test_two_approvals_are_valid_until_the_earlier_of_both_expiries(
    first_expires: timedelta, expires: timedelta
) -> None:
    op = _waiting()
    decided = _approve("token:carol", (_given("token:bob", expires=first_expires),), at=20 * MINUTE)
    p = planned(op, decided, now=NOW + 20 * MINUTE)
    assert p.changes["approval_expires_at"] == NOW + expires


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        # The submitter is never one of the two, under either of the names the doors use.
        ((), SELF_APPROVAL),
        ((_given("token:bob"),), SELF_APPROVAL),
    ],
)
@pytest.mark.parametrize("submitter", ["alice", "token:alice"])
def test_the_submitter_is_never_one_of_the_two(
    given: tuple[GivenApproval, ...], reason: str, submitter: str
) -> None:
    with pytest.raises(AnotherApproverNeededError) as refused:
        _approve(submitter, given)
    assert refused.value.reason == reason
    assert "two other people" in str(refused.value)


@pytest.mark.parametrize("first", ["bob", "token:bob", "human:token:bob"])
def test_the_same_person_twice_is_refused_with_the_reason(first: str) -> None:
    with pytest.raises(AnotherApproverNeededError) as refused:
        _approve(Author(kind=AuthorKind.token, name="bob"), (_given(first),))
    assert refused.value.reason == SAME_APPROVER
    assert "already approved; another approver must approve" in str(refused.value)


@pytest.mark.parametrize(
    "earlier",
    [
        # Expired before the second came: it no longer counts, this one is a new first.
        _given("token:bob", expires=5 * MINUTE),
        _given("token:bob", expires=10 * MINUTE),
        # An approval of another fingerprint (a payload since changed) never counts.
        _given("token:bob", fingerprint="another payload"),
    ],
)
def test_an_earlier_approval_that_no_longer_stands_leaves_this_one_the_first(
    earlier: GivenApproval,
) -> None:
    decided = _approve("token:carol", (earlier,))
    assert isinstance(decided.action, Record)
    assert decided.action.event is EventKind.approval_recorded and decided.action.to is None


def test_an_expired_approval_of_the_same_person_does_not_refuse_their_new_one() -> None:
    decided = _approve("token:bob", (_given("token:bob", expires=5 * MINUTE),))
    assert isinstance(decided.action, Record)
    assert decided.action.event is EventKind.approval_recorded


@pytest.mark.parametrize("allowed", [True, False])
def test_one_required_keeps_the_single_approval_and_the_tenants_choice(allowed: bool) -> None:
    # The submitter approving its own operation is the tenant's call, checked here for
    # every door (issue 33): allowed for one approval only where the token's tenant says so.
    op = _waiting()

    def decide() -> Decided:
        return decide_approval(
            op,
            fingerprint=op.request_fingerprint,
            approver=token_author("alice", allows_self_approval=allowed),
            now=NOW + MINUTE,
            valid_for=HOUR,
            waiting_since=NOW,
            window=DAY,
        )

    if allowed:
        assert planned(op, decide(), now=NOW + MINUTE).changes["authorized_by"] == "token:alice"
    else:
        with pytest.raises(AnotherApproverNeededError) as refused:
            decide()
        assert refused.value.reason == SELF_APPROVAL


def test_two_long_names_are_cut_to_the_column_never_refused() -> None:
    op = _waiting()
    decided = _approve("token:" + "c" * 150, (_given("token:" + "b" * 150),))
    authorized = planned(op, decided, now=NOW + 10 * MINUTE).changes["authorized_by"]
    assert isinstance(authorized, str) and len(authorized) == 200 and authorized.endswith("…")


def _event(seq: int, kind: EventKind, **fields: object) -> ChainedEvent:
    draft = EventDraft(kind=kind, actor="x", at=NOW, **fields)  # type: ignore[arg-type]
    return ChainedEvent(operation_id="op", seq=seq, draft=draft, prev_hash="", hash="")


def test_the_approvals_read_from_the_history_are_those_of_the_current_wait_only() -> None:
    recorded = {"approver": "bob", "fingerprint": "a" * 64, "expires_at": NOW.isoformat()}
    history = [
        _event(1, EventKind.intent_recorded, to_state="awaiting_approval"),
        _event(2, EventKind.approval_recorded, excerpt=recorded),
        # Queued again and re-admitted: a new wait, whose approvals start from none.
        _event(3, EventKind.admitted, from_state="queued", to_state="awaiting_approval"),
        _event(4, EventKind.approval_recorded, excerpt={**recorded, "approver": "carol"}),
    ]
    assert given_approvals(history) == (
        # A typed name (recorded before identities were authenticated) never counts.
        GivenApproval(approver="carol", fingerprint="a" * 64, expires_at=NOW, authenticated=False),
    )
    assert given_approvals(history[:3]) == ()


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [("alice", "token:alice", True), ("token:a", "token:a", True), ("alice", "bob", False)],
)
def test_the_doors_two_names_for_one_person_are_the_same_person(a: str, b: str, same: bool) -> None:
    assert same_person(a, b) is same


SANDBOX = (REPO / "jobwarden" / "config" / "providers" / "sandbox.toml").read_text()


def _loaded(tmp_path: Path, top: str) -> ProviderContract:
    path = tmp_path / "sandbox.toml"
    path.write_text(SANDBOX.replace("requires_approval = false", top))
    return load_contract(path)


def test_approvals_required_2_implies_approval_and_1_is_the_default(tmp_path: Path) -> None:
    two = _loaded(tmp_path, "approvals_required = 2")
    assert (two.requires_approval, two.approvals_required) == (True, 2)
    one = _loaded(tmp_path, "requires_approval = true")
    assert (one.requires_approval, one.approvals_required) == (True, 1)
    pair = load_contract(REPO / "tests" / "unit" / "contracts" / "valid" / "deploy_pair.toml")
    assert (pair.requires_approval, pair.approvals_required) == (True, 2)


@pytest.mark.parametrize(
    ("top", "field", "problem"),
    [
        ("approvals_required = 3", "approvals_required", "must be at most 2, got 3"),
        ("approvals_required = 0", "approvals_required", "must be a positive whole number"),
        ("approvals_required = 1.5", "approvals_required", "must be a whole number"),
        (
            "requires_approval = false\napprovals_required = 2",
            "requires_approval",
            "approvals_required = 2 needs approval",
        ),
    ],
)
def test_a_bad_approvals_required_is_refused_naming_the_file_and_field(
    tmp_path: Path, top: str, field: str, problem: str
) -> None:
    with pytest.raises(ContractError) as caught:
        _loaded(tmp_path, top)
    assert caught.value.file == str(tmp_path / "sandbox.toml")
    assert (caught.value.field, problem in caught.value.problem) == (field, True)
