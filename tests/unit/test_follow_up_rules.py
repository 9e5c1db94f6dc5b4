"""The pure parts of follow-up operations (issue 40): ``[follow_ups.<name>]`` as a contract
declares it (every refusal naming its field), which parent states allow one, the derived
keys, instruction ids, and the amount rule as a table and as a property.
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.contracts.contract import FollowUpSpec, ParentField, Source
from jobwarden.models.contracts.follow_ups import FollowUpTable
from jobwarden.models.contracts.loader import (
    SHIPPED_CONTRACTS_DIR,
    check_contracts,
    load_contract_text,
)
from jobwarden.models.errors import ContractError, InvalidSubmissionError
from jobwarden.models.intake.follow_ups import (
    RELEASED_STATES,
    AmountLimitError,
    FollowUpNotAllowedError,
    Link,
    ParentStateError,
    automatic_kinds,
    check_amount,
    check_instruction_id,
    check_parent_state_now,
    follow_up_key,
    requested_amount,
    spec_for,
)
from jobwarden.models.intake.reserved_keys import ReservedKeyError, check_caller_key
from jobwarden.models.states import OperationState as S

SANDBOX = (SHIPPED_CONTRACTS_DIR / "sandbox.toml").read_text()
PARENT = uuid.UUID("5d1e2f3a-4b5c-4d6e-8f70-8192a3b4c5d6")


def _with(table: str) -> str:
    return SANDBOX + "\n" + table


def _load(table: str) -> FollowUpSpec:
    contract = load_contract_text(_with(table), SHIPPED_CONTRACTS_DIR / "sandbox.toml")
    (spec,) = contract.follow_ups.values()
    return spec


def test_a_declaration_builds_its_spec() -> None:
    spec = _load(
        "[follow_ups.refund]\n"
        'provider = "sandbox_refund"\n'
        'parent_states = ["succeeded"]\n'
        'amount_field = "amount"\n'
        'limit = "result.amount_captured"\n'
    )
    assert spec.name == "refund"
    assert spec.parent_states == frozenset({S.succeeded})
    assert spec.amount is not None
    assert spec.amount.amount_field == "amount"
    assert spec.amount.limit == ParentField(source=Source.result, name="amount_captured")
    assert not spec.at_most_one and not spec.requires_approval and not spec.automatic_after


REFUSED = [
    ('provider = "x"\nparent_states = []', "follow_ups.f.parent_states", "at least one"),
    ('provider = "x"\nparent_states = ["done"]', "follow_ups.f.parent_states[0]", "unknown state"),
    (
        'provider = "x"\nparent_states = ["awaiting_approval"]',
        "follow_ups.f.parent_states[0]",
        "before the parent's create",
    ),
    (
        'provider = "x"\nparent_states = ["succeeded"]\namount_field = "amount"',
        "follow_ups.f.limit",
        "go together",
    ),
    (
        'provider = "x"\nparent_states = ["succeeded"]\namount_field = "amount"\nlimit = "amount"',
        "follow_ups.f.limit",
        "'command.<field>' or 'result.<field>'",
    ),
    (
        'provider = "x"\nparent_states = ["failed"]\nautomatic_after = ["failed"]',
        "follow_ups.f.at_most_one",
        "at_most_one = true",
    ),
    (
        'provider = "x"\nparent_states = ["succeeded"]\nat_most_one = true\n'
        'automatic_after = ["failed"]',
        "follow_ups.f.automatic_after[0]",
        "not one of parent_states",
    ),
    (
        'provider = "x"\nparent_states = ["observing"]\nat_most_one = true\n'
        'automatic_after = ["observing"]',
        "follow_ups.f.automatic_after[0]",
        "not an end",
    ),
    (
        'provider = "x"\nparent_states = ["succeeded"]\ncommand_from_parent = { a = "command.b" }',
        "follow_ups.f.command_from_parent",
        "only used with automatic_after",
    ),
    ('provider = "x"\nparent_states = ["succeeded"]\nlimt = "x"', "follow_ups.f.limt", "limit"),
]


@pytest.mark.parametrize(("body", "field", "problem"), REFUSED)
def test_a_bad_declaration_is_refused_naming_its_field(body: str, field: str, problem: str) -> None:
    with pytest.raises(ContractError) as refused:
        load_contract_text(
            _with(f"[follow_ups.f]\n{body}\n"), SHIPPED_CONTRACTS_DIR / "sandbox.toml"
        )
    assert refused.value.field == field
    assert problem in refused.value.problem


def test_a_follow_up_name_must_be_a_key_word() -> None:
    with pytest.raises(ContractError) as refused:
        load_contract_text(
            _with('[follow_ups.Refund-1]\nprovider = "x"\nparent_states = ["succeeded"]\n'),
            SHIPPED_CONTRACTS_DIR / "sandbox.toml",
        )
    assert refused.value.field == "follow_ups.Refund-1"


def test_providers_check_refuses_a_follow_up_naming_no_contract(tmp_path: Path) -> None:
    (tmp_path / "sandbox.toml").write_text(
        _with('[follow_ups.refund]\nprovider = "nowhere"\nparent_states = ["succeeded"]\n')
    )
    contracts, errors = check_contracts(tmp_path)
    assert contracts == {}
    (error,) = errors
    assert error.field == "follow_ups.refund.provider"
    assert "'nowhere'" in error.problem


def test_the_shipped_payments_and_deploy_contracts_declare_their_follow_ups() -> None:
    contracts, errors = check_contracts(SHIPPED_CONTRACTS_DIR)
    assert errors == []
    assert contracts["sandbox_payments"].follow_ups["capture"].at_most_one
    refund = contracts["sandbox_capture"].follow_ups["refund"]
    assert refund.amount is not None and str(refund.amount.limit) == "result.amount"
    rollback = contracts["sandbox_deploy"].follow_ups["rollback"]
    assert rollback.requires_approval and rollback.automatic_after == {S.result_validation_failed}
    assert automatic_kinds(contracts["sandbox_deploy"], S.result_validation_failed) == ("rollback",)
    assert automatic_kinds(contracts["sandbox_deploy"], S.failed) == ()
    schema = contracts["sandbox_deploy"].command
    assert schema is not None


def test_the_table_names_every_spec_field_it_builds_from() -> None:
    table = set(FollowUpTable.model_fields)
    spec = {f.name for f in dataclasses.fields(FollowUpSpec)}
    # name is the table's key; amount is built from amount_field and limit.
    assert spec - {"name", "amount"} | {"amount_field", "limit"} == table


def _spec(**fields: object) -> FollowUpSpec:
    values: dict[str, object] = {
        "name": "refund",
        "provider": "sandbox_refund",
        "parent_states": frozenset({S.succeeded}),
    }
    return FollowUpSpec(**(values | fields))  # type: ignore[arg-type]


@pytest.mark.parametrize("state", list(S))
def test_only_the_declared_parent_states_allow_a_follow_up(state: S) -> None:
    link = Link(parent=PARENT, kind="capture", parent_states=frozenset({S.succeeded}))
    if state is S.succeeded:
        check_parent_state_now(link, state)
        return
    with pytest.raises(ParentStateError) as refused:
        check_parent_state_now(link, state)
    assert (refused.value.state, refused.value.required) == (state.value, "succeeded")


def test_a_kind_the_contract_does_not_declare_is_refused_naming_those_it_does() -> None:
    contracts, _ = check_contracts(SHIPPED_CONTRACTS_DIR)
    with pytest.raises(FollowUpNotAllowedError, match=r"allowed: capture"):
        spec_for(contracts["sandbox_payments"], "refund")


def test_derived_keys_are_reserved_and_one_per_parent_kind_and_instruction() -> None:
    once = follow_up_key(PARENT, "capture", None)
    assert once == f"follow-up:{PARENT}:capture"
    assert follow_up_key(PARENT, "refund", "r1") != follow_up_key(PARENT, "refund", "r2")
    for key in (once, follow_up_key(PARENT, "refund", "r1")):
        with pytest.raises(ReservedKeyError):
            check_caller_key(key)


@pytest.mark.parametrize(
    ("at_most_one", "given", "answer"),
    [
        (True, None, None),
        (True, "x", InvalidSubmissionError),
        (False, None, InvalidSubmissionError),
        (False, "refund-2026-12-07.1", "refund-2026-12-07.1"),
        (False, "has space", InvalidSubmissionError),
        (False, "x" * 101, InvalidSubmissionError),
        (False, 7, InvalidSubmissionError),
    ],
)
def test_instruction_ids(at_most_one: bool, given: object, answer: object) -> None:
    spec = _spec(at_most_one=at_most_one)
    if isinstance(answer, type):
        with pytest.raises(answer, match="instruction_id"):
            check_instruction_id(spec, given)
    else:
        assert check_instruction_id(spec, given) == answer


def test_the_amount_is_a_positive_whole_number_of_minor_units() -> None:
    from jobwarden.models.contracts.contract import AmountRule

    rule = AmountRule(amount_field="amount", limit=ParentField(source=Source.result, name="a"))
    spec = _spec(amount=rule)
    assert requested_amount(spec, {"amount": 250}) == 250
    assert requested_amount(_spec(), {"amount": 250}) is None  # no rule, no amount
    for bad in (0, -5, 2.5, True, "250"):
        with pytest.raises(InvalidSubmissionError, match=r"command\.amount"):
            requested_amount(spec, {"amount": bad})
    with pytest.raises(InvalidSubmissionError, match="required"):
        requested_amount(spec, {})


def _link(amount: int, limit: int) -> Link:
    return Link(parent=PARENT, kind="refund", amount=amount, limit=limit, limit_field="result.a")


@pytest.mark.parametrize(
    ("already", "amount", "fits"),
    [(0, 1000, True), (900, 100, True), (900, 101, False), (1000, 1, False), (0, 1001, False)],
)
def test_the_amount_rule(already: int, amount: int, fits: bool) -> None:
    if fits:
        check_amount(_link(amount, 1000), already)
        return
    with pytest.raises(AmountLimitError) as refused:
        check_amount(_link(amount, 1000), already)
    assert refused.value.remaining == max(0, 1000 - already)
    assert f"remaining {refused.value.remaining}" in str(refused.value)


@given(
    limit=st.integers(min_value=0, max_value=10**6),
    amounts=st.lists(st.integers(min_value=1, max_value=10**5), max_size=30),
)
def test_accepted_amounts_never_sum_past_the_limit(limit: int, amounts: list[int]) -> None:
    accepted: list[int] = []
    for amount in amounts:
        try:
            check_amount(_link(amount, limit), sum(accepted))
        except AmountLimitError as exc:
            assert exc.remaining == limit - sum(accepted)
            assert amount > exc.remaining
        else:
            accepted.append(amount)
    assert sum(accepted) <= limit


def test_failed_cancelled_and_unsent_follow_ups_release_their_amount_and_nothing_else() -> None:
    assert {
        S.failed,
        S.cancelled,
        S.expired,
        S.abandoned,
        S.approval_expired,
    } == RELEASED_STATES
    # A refund still running, or one whose result could not be read, still owes its amount.
    assert S.observing not in RELEASED_STATES
    assert S.result_unavailable not in RELEASED_STATES
