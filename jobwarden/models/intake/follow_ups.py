"""Follow-up operations: what may follow a parent, under which key, for how much.

Pure. A follow-up (a capture, a refund, a rollback) is a new operation performed by the
contract its parent's ``[follow_ups.<kind>]`` names (models/contracts/follow_ups.py),
submitted through intake like any other (own id, token, fingerprint, deadlines and
approval) and linked both ways: the child names its parent and kind (``follows``,
``follow_up_kind``, in its row and its intent event), the parent's follow-ups are the
rows naming it. Here: which follow-up the parent's contract allows, whether the
parent's state allows it, the key (derived from the parent, the kind and for a
follow-up that may be many its instruction id: reserved, models/intake/reserved_keys.py)
and the amount it requests. The sum of amounts is checked by intake under the parent's
row lock (models/persistence/follow_up_store.py), since only Postgres sees concurrent
requests.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jobwarden.models.contracts.contract import (
    FollowUpSpec,
    ParentField,
    ProviderContract,
    Source,
)
from jobwarden.models.errors import InvalidSubmissionError, RefusedInputError
from jobwarden.models.intake.reserved_keys import FOLLOW_UP
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.operation import Operation
from jobwarden.models.states import OperationState

# Instruction ids are part of the derived key (idempotency_key is 255 characters: the
# prefix, a uuid, the kind and the separators leave room for 100).
INSTRUCTION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,99}\Z")
# The actor of a follow-up an automatic rule started: rule:<kind> (never a person).
RULE_PREFIX: Final = "rule:"
# Amounts are whole minor units (cents); past 2^53 - 1 JSON numbers stop being exact.
MAX_AMOUNT: Final = 2**53 - 1
# The ends after which a follow-up's amount no longer counts: the provider said nothing
# was done (failed, cancelled, expired) or nothing was ever sent (abandoned, unapproved).
# Every other state counts, pending or done: a refund that may still happen is owed.
RELEASED_STATES: Final = frozenset(
    {
        OperationState.failed,
        OperationState.cancelled,
        OperationState.expired,
        OperationState.abandoned,
        OperationState.approval_expired,
    }
)


class FollowUpNotAllowedError(RefusedInputError):
    """The parent's contract allows no such follow-up, or not in the parent's state."""


@dataclass(eq=False)
class ParentStateError(FollowUpNotAllowedError):
    """The parent is not in a state the follow-up may start from."""

    template = (
        "{kind}: operation {parent} is {state}; a {kind} may follow only an operation "
        "that is {required}"
    )

    kind: str
    parent: str
    state: str
    required: str


@dataclass(eq=False)
class AmountLimitError(RefusedInputError):
    """The follow-up's amount would take the parent's follow-ups past their limit.

    Same error from every door; the API answers it as a 409 ``amount_limit_exceeded``
    problem with ``remaining``, ``limit`` and ``requested`` as members.
    """

    template = (
        "{field}: {requested} exceeds what remains of operation {parent}'s {limit_field} "
        "({limit}): remaining {remaining} after {already} already requested by its {kind} "
        "follow-ups"
    )

    field: str
    requested: int
    remaining: int
    limit: int
    already: int
    parent: str
    limit_field: str
    kind: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Link:
    """A follow-up's link to its parent, carried through intake into its row and intent
    event; ``amount`` and ``limit`` only under an amount rule."""

    parent: uuid.UUID
    kind: str
    amount: int | None = None
    limit: int | None = None
    limit_field: str | None = None
    # The rule that started it (rule:<kind>), or None for a person's or a caller's start.
    rule: str | None = None
    # The parent states it may start from, checked again under the parent's lock.
    parent_states: frozenset[OperationState] = frozenset()
    # The declaration demands its own approval, whatever its contract says.
    requires_approval: bool = False


def spec_for(contract: ProviderContract, kind: str) -> FollowUpSpec:
    """The parent contract's declaration of ``kind``; FollowUpNotAllowedError otherwise."""
    spec = contract.follow_ups.get(kind)
    if spec is None:
        allowed = ", ".join(sorted(contract.follow_ups)) or "none"
        raise FollowUpNotAllowedError(
            f"kind: provider {contract.name!r} allows no follow-up {kind!r} (allowed: {allowed})"
        )
    return spec


def check_parent_state(spec: FollowUpSpec, parent: Operation) -> None:
    """ParentStateError naming the parent's state and the required ones."""
    if parent.state not in spec.parent_states:
        raise ParentStateError(
            spec.name,
            str(parent.operation_id),
            parent.state.value,
            " or ".join(sorted(s.value for s in spec.parent_states)),
        )


def follow_up_key(parent: uuid.UUID, kind: str, instruction_id: str | None) -> str:
    """The follow-up's idempotency key: one per parent and kind for a follow-up that is at
    most one, one per instruction for the others."""
    base = f"{FOLLOW_UP.prefix}{parent}:{kind}"
    return base if instruction_id is None else f"{base}:{instruction_id}"


def check_instruction_id(spec: FollowUpSpec, value: object) -> str | None:
    """The instruction id a follow-up that may be many needs, and one that is at most one
    refuses (asking again is the same operation); InvalidSubmissionError names it."""
    if spec.at_most_one:
        if value is not None:
            raise InvalidSubmissionError(
                f"instruction_id: a {spec.name} is at most one per operation (asking again is "
                "the same one): leave instruction_id out"
            )
        return None
    if value is None:
        raise InvalidSubmissionError(
            f"instruction_id: each {spec.name} needs its own instruction id (a second "
            f"{spec.name} is a new instruction, never a retry of the first)"
        )
    if not isinstance(value, str) or not INSTRUCTION_ID.match(value):
        raise InvalidSubmissionError(
            "instruction_id: letters, digits and . _ : @ + = - (at most 100), starting "
            "with a letter or digit"
        )
    return value


def whole_amount(field: str, value: object) -> int:
    """A positive whole number of minor units; InvalidSubmissionError naming ``field``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSubmissionError(
            f"{field}: must be a whole number of minor units, got {type(value).__name__}"
        )
    if not 0 < value <= MAX_AMOUNT:
        raise InvalidSubmissionError(f"{field}: must be between 1 and {MAX_AMOUNT}")
    return value


def requested_amount(spec: FollowUpSpec, command: Mapping[str, Any]) -> int | None:
    """What the follow-up's command requests under the amount rule (None: no rule)."""
    if spec.amount is None:
        return None
    name = spec.amount.amount_field
    if name not in command:
        raise InvalidSubmissionError(f"command.{name}: required (the {spec.name}'s amount)")
    return whole_amount(f"command.{name}", command[name])


def field_of(source: Mapping[str, Any] | None, where: ParentField, parent: uuid.UUID) -> Any:
    """A parent's command or result field; FollowUpNotAllowedError when it has none."""
    if source is None or where.name not in source:
        raise FollowUpNotAllowedError(
            f"operation {parent} has no {where}: nothing to follow up against"
        )
    return source[where.name]


def limit_of(spec: FollowUpSpec, parent: uuid.UUID, value: object) -> int:
    """The parent's limit as a whole amount; the parent's own field, so a bad one is the
    parent's fault, named as such."""
    assert spec.amount is not None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FollowUpNotAllowedError(
            f"operation {parent}'s {spec.amount.limit} is not a whole amount ({value!r})"
        )
    return value


def check_parent_state_now(link: Link, state: OperationState | None) -> None:
    """The parent's state as its lock found it (None: gone) still allows the follow-up."""
    if state is None:
        raise FollowUpNotAllowedError(f"no operation {link.parent}")
    if link.parent_states and state not in link.parent_states:
        raise ParentStateError(
            link.kind,
            str(link.parent),
            state.value,
            " or ".join(sorted(s.value for s in link.parent_states)),
        )


def check_amount(link: Link, already: int) -> None:
    """AmountLimitError unless ``already`` (what live follow-ups requested) plus this one
    fits the limit: the pure rule the store applies under the parent's lock."""
    if link.amount is None or link.limit is None:
        return
    remaining = max(0, link.limit - already)
    if link.amount > remaining:
        raise AmountLimitError(
            "amount",
            link.amount,
            remaining,
            link.limit,
            already,
            str(link.parent),
            link.limit_field or "limit",
            link.kind,
        )


def request_for(  # noqa: PLR0913 - the child's request, each part named at the call
    parent: Operation,
    spec: FollowUpSpec,
    command: Mapping[str, Any],
    *,
    requested_by: str,
    instruction_id: str | None,
    concurrency_key: str | None = None,
) -> SubmissionRequest:
    """The follow-up's submission: the parent's tenant, the follow-up's contract, the
    command as given, the derived key. Its budgets and deadlines are its own contract's."""
    return SubmissionRequest(
        tenant=parent.tenant,
        requested_by=requested_by,
        provider=spec.provider,
        command=dict(command),
        idempotency_key=follow_up_key(parent.operation_id, spec.name, instruction_id),
        concurrency_key=concurrency_key,
    )


def automatic_kinds(contract: ProviderContract, state: OperationState) -> tuple[str, ...]:
    """The follow-ups a rule starts once an operation of ``contract`` ends in ``state``."""
    return tuple(
        sorted(name for name, spec in contract.follow_ups.items() if state in spec.automatic_after)
    )


def automatic_command(
    spec: FollowUpSpec, parent: Operation, result: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The command a rule's follow-up is started with: fields copied from the parent's
    command or collected result (``result``: None when it has none)."""
    command: dict[str, Any] = {}
    for name, where in spec.command_from_parent.items():
        source = parent.command if where.source is Source.command else result
        command[name] = field_of(source, where, parent.operation_id)
    return command


def rule_actor(kind: str) -> str:
    return f"{RULE_PREFIX}{kind}"
