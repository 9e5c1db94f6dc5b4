"""``[follow_ups.<name>]``: the follow-up operations an operation of this contract allows.

A capture after a payment intent, a refund after a capture, a rollback after a deploy:
each is an operation of its own (own id, token, fingerprint, deadlines, approval and
history) performed by another provider contract, linked to its parent both ways
(models/intake/follow_ups.py decides, tasks/follow_ups.py starts one). The table says
which contract performs it, which parent states allow it, whether it needs its own
approval, whether a parent may have at most one, an optional amount rule (the sum of
what its follow-ups of this name request can never exceed a named amount of the
parent) and an optional automatic rule (started by the worker once the parent ends in
a named state, and recorded as started by that rule).

Pure. The contract it names is another file, so only ``jobwarden providers check``
(``check_follow_up_targets``) can tell whether it exists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Final, Self

from pydantic import Field, model_validator

from jobwarden.models.contracts.contract import AmountRule, FollowUpSpec, ParentField, Source
from jobwarden.models.contracts.fields import Flag, StrList, Text, problem
from jobwarden.models.contracts.sections import ContractTable
from jobwarden.models.errors import ContractError
from jobwarden.models.states import TERMINAL, OperationState

# A follow-up's name is part of derived keys, URLs and CLI arguments.
NAME: Final = re.compile(r"[a-z][a-z0-9_]{0,39}\Z")
# A command field or a parent's field: one top-level JSON property.
_PROPERTY: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\Z")
# The states no parent may be followed up in: it has not been sent (or not decided) yet.
NEVER_PARENT_STATES: Final = frozenset({OperationState.queued, OperationState.awaiting_approval})


def parent_field(value: str, key: str) -> ParentField:
    """``command.<name>`` or ``result.<name>``; a contract problem naming ``key``."""
    source, _, name = value.partition(".")
    if source not in Source.__members__ or not _PROPERTY.match(name):
        raise problem(
            f"must be 'command.<field>' or 'result.<field>' (a top-level field of the "
            f"parent's command or collected result), got {value!r}",
            field=key,
        )
    return ParentField(source=Source(source), name=name)


def _states(values: tuple[str, ...], key: str) -> frozenset[OperationState]:
    known = {s.value for s in OperationState}
    for index, value in enumerate(values):
        if value not in known:
            raise problem(
                f"unknown state {value!r}; states: {', '.join(sorted(known))}",
                field=f"{key}[{index}]",
            )
        if OperationState(value) in NEVER_PARENT_STATES:
            raise problem(
                f"{value!r} is before the parent's create was decided: nothing to follow up",
                field=f"{key}[{index}]",
            )
    return frozenset(OperationState(v) for v in values)


class FollowUpTable(ContractTable):
    """[follow_ups.<name>]: one follow-up operation an operation of this contract allows."""

    builds = FollowUpSpec
    provider: Text
    """The provider contract that performs the follow-up (another file's name)."""
    parent_states: StrList
    """The parent states it may start from ('succeeded' for a capture or a refund)."""
    requires_approval: Flag = False
    """Whether the follow-up waits for its own approval, whatever its contract says."""
    at_most_one: Flag = False
    """One per parent (a capture): asking again is the same operation. Otherwise each
    start names its own instruction id (a refund)."""
    amount_field: Text | None = None
    """The follow-up command's field holding its amount, in whole minor units."""
    limit: Text | None = None
    """The parent's field the amounts may sum up to: 'command.<field>' or 'result.<field>'."""
    automatic_after: StrList = ()
    """Parent ends after which the worker starts it itself, recorded as rule:<name>."""
    command_from_parent: dict[str, str] = Field(default_factory=dict)
    """The automatic start's command: follow-up field = 'command.<field>' of the parent."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if not self.parent_states:
            raise problem("must name at least one state", field="parent_states")
        allowed = _states(self.parent_states, "parent_states")
        automatic = _states(self.automatic_after, "automatic_after")
        for index, state in enumerate(self.automatic_after):
            if OperationState(state) not in allowed:
                raise problem(
                    f"{state!r} is not one of parent_states: it could never start",
                    field=f"automatic_after[{index}]",
                )
            if OperationState(state) not in TERMINAL:
                raise problem(
                    f"{state!r} is not an end: an automatic follow-up starts once the parent "
                    "has ended",
                    field=f"automatic_after[{index}]",
                )
        if automatic and not self.at_most_one:
            raise problem(
                "an automatic follow-up needs at_most_one = true (a rule that could start it "
                "twice would do its work twice)",
                field="at_most_one",
            )
        if (self.amount_field is None) != (self.limit is None):
            raise problem("amount_field and limit go together", field="limit")
        if self.amount_field is not None and not _PROPERTY.match(self.amount_field):
            raise problem("must be a top-level command field name", field="amount_field")
        if self.limit is not None:
            parent_field(self.limit, "limit")
        for key, value in self.command_from_parent.items():
            if not _PROPERTY.match(key):
                raise problem(
                    "must be a top-level command field name", field=f"command_from_parent.{key}"
                )
            parent_field(value, f"command_from_parent.{key}")
        if self.command_from_parent and not automatic:
            raise problem("only used with automatic_after", field="command_from_parent")
        return self

    def spec(self) -> FollowUpSpec:
        amount = None
        if self.amount_field is not None and self.limit is not None:
            amount = AmountRule(
                amount_field=self.amount_field, limit=parent_field(self.limit, "limit")
            )
        return FollowUpSpec(
            name="",  # set by follow_ups_of, which knows the table's name
            provider=self.provider,
            parent_states=_states(self.parent_states, "parent_states"),
            requires_approval=self.requires_approval,
            at_most_one=self.at_most_one,
            amount=amount,
            automatic_after=_states(self.automatic_after, "automatic_after"),
            command_from_parent={
                k: parent_field(v, f"command_from_parent.{k}")
                for k, v in self.command_from_parent.items()
            },
        )


FollowUpTables = Annotated[dict[str, FollowUpTable], "follow_ups"]


def check_names(file: str, raw: Mapping[str, object]) -> list[ContractError]:
    """Names that could not be a follow-up's kind (in keys, URLs and CLI arguments)."""
    return [
        ContractError(
            file,
            f"follow_ups.{name}",
            "a follow-up's name must be lower case letters, digits and '_' (at most 40), "
            "starting with a letter",
        )
        for name in raw
        if not NAME.match(name)
    ]


def check_follow_up_targets(
    contract_name: str, specs: Mapping[str, FollowUpSpec], known: Mapping[str, object], file: str
) -> list[ContractError]:
    """What only the whole directory can tell: each follow-up names a contract that exists."""
    errors = []
    for name, spec in specs.items():
        if spec.provider not in known:
            errors.append(
                ContractError(
                    file,
                    f"follow_ups.{name}.provider",
                    f"names no provider contract: {spec.provider!r} (known: "
                    f"{', '.join(sorted(known))})",
                )
            )
        elif spec.provider == contract_name and spec.automatic_after:
            errors.append(
                ContractError(
                    file,
                    f"follow_ups.{name}.provider",
                    "an automatic follow-up performed by its own contract could start itself",
                )
            )
    return errors
