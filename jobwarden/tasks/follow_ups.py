"""Starting a follow-up operation: every door's one call, and the automatic rules.

A follow-up (a capture, a refund, a rollback) is a new operation submitted through the
one intake (``submit_request``): its own id, token, fingerprint, deadlines and approval.
Here the parent is read and the pure rules of models/intake/follow_ups.py applied (the
kind is declared, the parent's state allows it, the instruction id, the amount and the
parent's limit); intake then checks the parent's state and the amount again under the
parent's row lock, in the claim's own transaction. Once the child exists its start is
recorded in the parent's history too (``follow_up_started``), so each history leads to
the other.

A rule (``automatic_after``) starts a follow-up when the parent ends in a named state:
``start_automatic`` runs after the step that ended it committed, as the rule
(``rule:<kind>``), under the same derived key, so a repeated wake-up starts it once.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobwarden.models.actions import Decided, Record
from jobwarden.models.contracts.contract import FollowUpSpec, ParentField, Source
from jobwarden.models.errors import JobwardenError, LostRaceError, RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.identity import HUMAN, Author, AuthorKind, as_author
from jobwarden.models.intake.follow_ups import (
    RELEASED_STATES,
    Link,
    automatic_command,
    automatic_kinds,
    check_instruction_id,
    check_parent_state,
    field_of,
    limit_of,
    request_for,
    requested_amount,
    rule_actor,
    spec_for,
)
from jobwarden.models.intake.submission import ACTOR_PREFIX
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import follow_up_store, result_rows, store
from jobwarden.models.persistence.db import snapshot
from jobwarden.models.states import TERMINAL
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.intake import Caller, SubmitOutcome, SubmitResult, submit_request
from jobwarden.tasks.runtime import Runtime, current
from jobwarden.tasks.steps import Writer, under_lease

log = get_logger("jobwarden.follow_ups")
# A parent's result read for a limit or a rule's command: a small JSON document.
MAX_RESULT_BYTES: Final = 1024 * 1024
# The parent's history is written as a person's intervention would be: it waits for a
# step in flight, and retries lost fenced races a few times.
PARENT_ATTEMPTS: Final = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowUpResult:
    """A follow-up's answer: intake's (created, replayed, conflict ...) and its link."""

    follows: str
    follow_up_kind: str
    submitted: SubmitResult

    @property
    def operation_id(self) -> str | None:
        return self.submitted.operation_id

    @property
    def outcome(self) -> SubmitOutcome:
        return self.submitted.outcome

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.submitted.as_dict(),
            "follows": self.follows,
            "follow_up_kind": self.follow_up_kind,
        }


def start_follow_up(  # noqa: PLR0913 - the door's words, each named at the call
    parent_id: str | uuid.UUID,
    kind: str,
    command: Mapping[str, Any],
    requested_by: Author | str,
    *,
    instruction_id: str | None = None,
    tenant: str | None = None,
    runtime: Runtime | None = None,
    door: str = "python",
    caller: Caller | None = None,
) -> FollowUpResult:
    """Start the follow-up ``kind`` of the operation ``parent_id`` with ``command``.

    ``tenant``: the caller's, where a door authenticates one (another tenant's operation
    is "no operation", as if it did not exist). ``instruction_id``: required for a kind
    that may be many (each refund is its own instruction), refused for one that is at
    most one (a second capture is the same operation). Raises RefusedInputError (its
    subclasses ParentStateError naming the parent's state and the required ones, and
    AmountLimitError naming what remains) for anything the rules refuse; the answer of
    a valid one is intake's: created, replayed (the same instruction again) or conflict
    (the same instruction with another command: nothing touched).
    """
    rt = runtime or current()
    if caller is None:
        # The Python door: a person's Author, or a typed name as jobwarden.submit takes it.
        author = as_author(requested_by, "requested_by")
        by = author.actor
        who = Caller(
            actor=None if author.kind is AuthorKind.named else f"{HUMAN}{by}",
            token_id=author.token_id,
            break_glass=author.reason,
        )
    else:
        # A door that authenticated its caller says who it is (the intake log's actor).
        by = requested_by.actor if isinstance(requested_by, Author) else requested_by
        who = caller
    parent = _parent(rt, parent_id, tenant)
    try:
        contract = rt.contract_for(parent)
    except KeyError:
        # A parent from before contracts were pinned, whose provider is no longer
        # configured: nothing declares its follow-ups (a refusal, not a crash).
        raise RefusedInputError(
            f"the parent's provider {parent.provider!r} is not configured: "
            "no follow-up of it can be started"
        ) from None
    spec = spec_for(contract, kind)
    check_parent_state(spec, parent)
    if not isinstance(command, Mapping):
        raise RefusedInputError("command must be a JSON object")
    instruction = check_instruction_id(spec, instruction_id)
    return _start(
        rt,
        parent,
        spec,
        command,
        requested_by=by,
        instruction=instruction,
        door=door,
        who=who,
        rule=None,
    )


def _start(  # noqa: PLR0913 - one start, each part named at the two calls
    rt: Runtime,
    parent: Operation,
    spec: FollowUpSpec,
    command: Mapping[str, Any],
    *,
    requested_by: str,
    instruction: str | None,
    door: str,
    who: Caller,
    rule: str | None,
) -> FollowUpResult:
    amount = requested_amount(spec, command)
    limit = None
    if spec.amount is not None:
        raw = _parent_field(rt, parent, spec.amount.limit)
        limit = limit_of(spec, parent.operation_id, raw)
    link = Link(
        parent=parent.operation_id,
        kind=spec.name,
        amount=amount,
        limit=limit,
        limit_field=str(spec.amount.limit) if spec.amount is not None else None,
        rule=rule,
        parent_states=spec.parent_states,
        requires_approval=spec.requires_approval,
    )
    request = request_for(
        parent, spec, command, requested_by=requested_by, instruction_id=instruction
    )
    answer = submit_request(
        request, door=door, caller=who, runtime=rt, derived_key=True, follow_up=link
    )
    result = FollowUpResult(
        follows=str(parent.operation_id), follow_up_kind=spec.name, submitted=answer
    )
    if answer.operation_id is None:
        return result  # in progress: a concurrent start of the same instruction decides
    child = uuid.UUID(answer.operation_id)
    _refuse_unlinked(rt, parent, spec.name, child)
    if answer.outcome in (SubmitOutcome.created, SubmitOutcome.replayed):
        actor = who.actor or f"{ACTOR_PREFIX}{requested_by}"
        _record_on_parent(rt, parent.operation_id, child, link, actor)
    return result


def _parent(rt: Runtime, parent_id: str | uuid.UUID, tenant: str | None) -> Operation:
    try:
        op_id = parent_id if isinstance(parent_id, uuid.UUID) else uuid.UUID(str(parent_id))
    except ValueError:
        raise RefusedInputError(f"operation_id: not an operation id: {parent_id!r}") from None
    with snapshot(rt.settings.database_url) as session:
        parent = store.load(session, op_id)
    if parent is None or (tenant is not None and parent.tenant != tenant):
        raise RefusedInputError(f"no operation {op_id}")
    return parent


def _parent_field(rt: Runtime, parent: Operation, where: ParentField) -> Any:
    """A field of the parent's stored command or of its collected result (JSON object)."""
    if where.source is Source.command:
        return field_of(parent.command, where, parent.operation_id)
    return field_of(_result_document(rt, parent), where, parent.operation_id)


def _result_document(rt: Runtime, parent: Operation) -> Mapping[str, Any] | None:
    """The parent's collected result as a JSON object (None: it has none, or not one)."""
    with snapshot(rt.settings.database_url) as session:
        stored = result_rows.result_of(session, parent.operation_id)
    if stored is None or stored.size_bytes > MAX_RESULT_BYTES:
        return None
    data = stored.content
    if data is None and stored.location is not None:
        data = b"".join(rt.result_store.read(stored.location))
    try:
        document = json.loads(data or b"")
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


def _refuse_unlinked(rt: Runtime, parent: Operation, kind: str, found: uuid.UUID) -> None:
    """Defence in depth (invariant 17): the operation holding a follow-up's key is adopted
    only when intake recorded it as this parent's follow-up of this kind."""
    with snapshot(rt.settings.database_url) as session:
        held = store.load(session, found)
    if held is None or held.follows != parent.operation_id or held.follow_up_kind != kind:
        raise RefusedInputError(
            f"idempotency key {held.idempotency_key if held else found} is held by operation "
            f"{found}, which is not a {kind} of {parent.operation_id}: refusing to adopt it "
            "(see `jobwarden keys check`)"
        )


def _record_on_parent(
    rt: Runtime, parent: uuid.UUID, child: uuid.UUID, link: Link, actor: str
) -> None:
    """The parent's history names the follow-up (once: a replay after a crash between
    the two writes records it then). A parent that stays busy past the attempts leaves
    the link in the child's row and intent event, which the family view reads."""
    with snapshot(rt.settings.database_url) as session:
        events = store.events_for(session, parent)
    if any(
        e.draft.kind is EventKind.follow_up_started
        and (e.draft.excerpt or {}).get("follow_up") == str(child)
        for e in events
    ):
        return
    excerpt: dict[str, Any] = {"follow_up": str(child), "follow_up_kind": link.kind}
    if link.amount is not None:
        excerpt["amount"] = link.amount
    if link.rule is not None:
        excerpt["started_by_rule"] = link.rule

    def note(op: Operation, now: datetime) -> Decided:
        record = Record(event=EventKind.follow_up_started, cause=link.kind, excerpt=excerpt)
        return Decided(action=record)

    writer = Writer(
        actor=actor,
        wait_seconds=rt.settings.intervention_wait_seconds or rt.settings.lease_ttl_seconds,
        lease_required=False,
        attempts=PARENT_ATTEMPTS,
    )
    try:
        under_lease(rt, parent, note, writer)
    except LostRaceError:
        log.warning("follow_up_link_unrecorded", operation_id=str(parent), follow_up=str(child))


def start_automatic(rt: Runtime, op: Operation) -> None:
    """After a commit that may have ended ``op``: start the follow-ups its contract's rules
    name for that end, as the rule. Never raises: the end is committed whatever happens
    here, and each failure is logged with the rule's name."""
    if op.state not in TERMINAL:
        return
    try:
        contract = rt.contract_for(op)
        kinds = automatic_kinds(contract, op.state)
    except JobwardenError:
        return
    for kind in kinds:
        spec = contract.follow_ups[kind]
        actor = rule_actor(kind)
        try:
            command = automatic_command(spec, op, _result_document(rt, op))
            _start(
                rt,
                op,
                spec,
                command,
                requested_by=actor,
                instruction=None,
                # The intake log's door is how it came in (a schedule's slot says python
                # too); its actor, rule:<kind>, says it was the rule, never a person.
                door="python",
                who=Caller(actor=actor),
                rule=actor,
            )
        except Exception as exc:  # the parent's end is committed; say which rule failed
            log.warning(
                "automatic_follow_up_failed",
                operation_id=str(op.operation_id),
                rule=actor,
                error=f"{type(exc).__name__}: {exc}",
            )


def family(rt: Runtime, op: Operation) -> dict[str, Any]:
    """The family view of ``op``: what it follows (and as what), its follow-ups with kind,
    state and amount, and per kind under an amount rule what its live follow-ups
    requested so far against the limit."""
    with snapshot(rt.settings.database_url) as session:
        members = follow_up_store.follow_ups_of(session, op.operation_id)
    amounts: dict[str, dict[str, Any]] = {}
    try:
        specs = rt.contract_for(op).follow_ups
    except JobwardenError:
        specs = {}
    for kind, spec in sorted(specs.items()):
        if spec.amount is None:
            continue
        try:
            raw = _parent_field(rt, op, spec.amount.limit)
            limit: int | None = limit_of(spec, op.operation_id, raw)
        except JobwardenError:
            limit = None  # not followed up yet (no result), or a parent without the field
        requested = sum(
            m.amount or 0 for m in members if m.kind == kind and m.state not in RELEASED_STATES
        )
        amounts[kind] = {
            "requested": requested,
            "limit": limit,
            "limit_field": str(spec.amount.limit),
            "remaining": None if limit is None else max(0, limit - requested),
        }
    follows = None
    if op.follows is not None:
        follows = {"operation_id": str(op.follows), "kind": op.follow_up_kind}
    return {
        "follows": follows,
        "follow_ups": [m.as_dict() for m in members],
        "amounts": amounts,
    }


# The Celery message's fields: start_follow_up's keywords a caller may send.
MESSAGE_FIELDS: Final = frozenset(
    {"parent_id", "kind", "command", "requested_by", "instruction_id", "tenant"}
)
REQUIRED_FIELDS: Final = frozenset({"parent_id", "kind", "command", "requested_by"})


def follow_up_from_message(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The Celery door's answer: the follow-up's outcome, or why it is invalid (nothing
    recorded but the intake log's refusal); only infrastructure failures raise."""
    unknown = sorted(str(k) for k in kwargs if k not in MESSAGE_FIELDS)
    if unknown:
        return {"outcome": "invalid", "error": f"unknown keyword arguments: {', '.join(unknown)}"}
    missing = sorted(REQUIRED_FIELDS - set(kwargs))
    if missing:
        return {"outcome": "invalid", "error": f"missing keyword arguments: {', '.join(missing)}"}
    requested_by = kwargs["requested_by"]
    if not isinstance(requested_by, str):
        return {"outcome": "invalid", "error": "requested_by must be a string"}
    try:
        answer = start_follow_up(
            str(kwargs["parent_id"]),
            str(kwargs["kind"]),
            kwargs["command"],
            requested_by,
            instruction_id=kwargs.get("instruction_id"),
            tenant=kwargs.get("tenant"),
            door="celery",
        )
    except RefusedInputError as exc:
        return {"outcome": "invalid", "error": str(exc)}
    return answer.as_dict()
