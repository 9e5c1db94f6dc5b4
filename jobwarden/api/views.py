"""What the read and action routes answer: the documented shapes (OpenAPI) and the
field types shared by their parameters and bodies.

Field names are the domain's words (operation, remote job, escalation,
fingerprint), the same as the columns and events they show.
"""

from __future__ import annotations

import re
import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path
from pydantic import AfterValidator, AwareDatetime, BaseModel, BeforeValidator, Field

from jobwarden.models.states import OperationState

NOT_FOUND_DETAIL = "no such operation"
NOT_FOUND = "no such operation for this tenant (also a malformed id)"
# Documented as a UUID, read as text: a malformed id is a 404 like any unknown one.
OperationId = Annotated[str, Path(json_schema_extra={"format": "uuid"})]


def storable(value: str) -> str:
    """Refuse text Postgres cannot take: a NUL, or an unpaired surrogate (no UTF-8 for it).

    Either would fail in the driver as a 500; refused here, it is a 422 naming the field.
    """
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode (no unpaired surrogates)") from None
    return value


# RFC 3339 section 5.6 date-time (what OpenAPI's format "date-time" names): a date, "T",
# a time with optional fraction, and "Z" or an offset. Nothing else: pydantic alone would
# also read a number ("0.5") as Unix seconds, which the schema never promised.
_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})",
    re.ASCII,
)


def rfc3339(value: object) -> object:
    """``value`` when it is an RFC 3339 date-time string; ValueError naming the form else."""
    if isinstance(value, str) and _RFC3339.fullmatch(value):
        return value
    raise ValueError("must be an RFC 3339 date-time, e.g. 2026-01-31T09:00:00Z")


DateTimeParam = Annotated[AwareDatetime, BeforeValidator(rfc3339)]


# A str bounded like its column (a Field beside it) and storable in Postgres.
StorableStr = Annotated[str, AfterValidator(storable)]


class Counter(BaseModel):
    used: int
    max: int | None
    text: str  # "3 of 200", as an operator says it


class Deadlines(BaseModel):
    create: datetime
    result: datetime
    cancel: datetime | None
    collect: datetime | None
    business: datetime | None = None  # the submission's business_deadline, if any


class OfferedOption(BaseModel):
    option: str
    label: str


class Escalation(BaseModel):
    reason: str | None
    detail: str | None
    options: list[OfferedOption]


class CancelRequest(BaseModel):
    requested_by: str
    reason: str | None
    # Who let this cancel leave during a pause (it is otherwise sent on resume).
    send_during_pause_by: str | None = None


class HoldView(BaseModel):
    """The active pause covering the operation: it sends nothing until that is resumed."""

    pause_id: uuid.UUID
    paused_by: str
    reason: str
    since: datetime
    parked: bool = Field(description="the pause has parked it (its history says so)")


class OperationLinks(BaseModel):
    self: str
    events: str


def result_path(operation_id: uuid.UUID | str) -> str:
    return f"/v1/operations/{operation_id}/result"


class ReferenceView(BaseModel):
    """An immutable reference in the command (models/contracts/references.py)."""

    path: str  # RFC 6901 JSON Pointer into the submission: /command/deploy/commit
    value: str  # the commit id or digest, exactly as it will be used
    kind: str  # git_commit, oci_digest or sha256


class CreateRequest(BaseModel):
    """The create as it leaves (or left): what an approver approves (provider/outgoing.py)."""

    method: str
    url: str
    headers: dict[str, str]  # in the order sent; the credential's value is "[redacted]"
    body: str | None  # the body bytes as sent, as text
    fingerprint: str
    transport_headers: list[str]  # added by the HTTP client: Host, Content-Length, ...
    # What an approval binds (models/outgoing.request_digest); name it when approving.
    request_digest: str | None = None
    credential_from: str | None = None  # the credential's reference (env:NAME, file:PATH)
    # The command's immutable references, named apart: which commit or digest will be used.
    references: list[ReferenceView] = []


class ResultView(BaseModel):
    """Where a collected result is and how to check it; its bytes at ``download``."""

    location: str | None  # the object's URL in the result store; null when kept inline
    sha256: str
    size_bytes: int
    content_type: str | None
    # true: validated (succeeded); false: kept after failing validation; "accepted": a
    # person accepted it as it is (models/results/access.py).
    validated: bool | Literal["accepted"]
    download: str


class Follows(BaseModel):
    """The operation a follow-up follows, and as what (its parent contract's follow-up)."""

    operation_id: uuid.UUID
    kind: str
    amount: int | None = Field(None, description="what it requests under the amount rule")


class FollowUp(BaseModel):
    """One follow-up of an operation (a capture, a refund, a rollback ...)."""

    operation_id: uuid.UUID
    kind: str
    state: OperationState
    amount: int | None = Field(None, description="whole minor units, under an amount rule")
    requested_by: str
    created_at: datetime


class FollowUpAmounts(BaseModel):
    """Per follow-up kind under an amount rule: the live follow-ups' sum and the limit."""

    requested: int = Field(description="what pending or succeeded follow-ups requested")
    limit: int | None = Field(description="the parent's limit; null until it has one")
    limit_field: str = Field(description="where the limit is read: command.<f> or result.<f>")
    remaining: int | None


class OperationView(BaseModel):
    operation_id: uuid.UUID
    tenant: str
    provider: str
    state: OperationState
    remote_job_id: str | None
    idempotency_key: str
    source_event_id: str | None
    fingerprint: str
    trace_id: str
    requested_by: str
    authorized_by: str | None
    approval_expires_at: datetime | None
    created_at: datetime
    accepted_at: datetime | None
    updated_at: datetime
    deadlines: Deadlines
    next_poll_at: datetime | None
    poll_not_before: datetime | None
    counters: dict[str, Counter]
    progress: float | None
    last_remote_state: str | None
    last_http_status: int | None
    escalation: Escalation | None
    cancel: CancelRequest | None
    # A pause holding it (issue 39); None when none does.
    hold: HoldView | None = None
    validation_summary: dict[str, Any] | None
    # None when the operation's provider is no longer configured.
    create_request: CreateRequest | None = None
    # A person's resubmission, both ways: the operation this one replaces, its replacement.
    resubmit_of: uuid.UUID | None = None
    resubmitted_as: uuid.UUID | None = None
    # -10..10: its turn among its tenant's requests waiting for the provider's rate limit.
    priority: int = 0
    # A follow-up operation's parent; an operation's follow-ups and their amounts so far.
    follows: Follows | None = None
    follow_ups: list[FollowUp] = Field(default_factory=list)
    follow_up_amounts: dict[str, FollowUpAmounts] = Field(default_factory=dict)
    # The collected result, when there is one (GET .../result streams it).
    result: ResultView | None = None
    links: OperationLinks


class OperationSummary(BaseModel):
    operation_id: uuid.UUID
    provider: str
    state: OperationState
    remote_job_id: str | None
    idempotency_key: str
    escalation_reason: str | None
    requested_by: str
    created_at: datetime
    updated_at: datetime
    links: OperationLinks


class PageLinks(BaseModel):
    next: str | None


class OperationList(BaseModel):
    operations: list[OperationSummary]
    links: PageLinks


class EventView(BaseModel):
    seq: int
    at: datetime
    actor: str
    kind: str
    from_state: str | None
    to_state: str | None
    cause: str | None
    delay_source: str | None
    http_status: int | None
    provider_request_id: str | None
    excerpt: dict[str, Any] | None


class ChainProblemView(BaseModel):
    seq: int
    problem: str


class ChainView(BaseModel):
    verified: bool
    problems: list[ChainProblemView]


class IntakeAttempt(BaseModel):
    at: datetime
    door: str
    actor: str
    token_id: uuid.UUID | None
    idempotency_key: str
    fingerprint: str | None
    outcome: str
    http_status: int | None
    trace_id: str | None
    detail: str | None


class OperationStory(BaseModel):
    operation_id: uuid.UUID
    state: OperationState
    events: list[EventView]
    chain: ChainView
    intake: list[IntakeAttempt]
    links: OperationLinks


class WaitingOperation(OperationSummary):
    escalation_detail: str | None
    waiting_since: datetime


class EscalationCounts(BaseModel):
    total: int
    by_reason: dict[str, int]
    by_state: dict[str, int]


class EscalationList(BaseModel):
    counts: EscalationCounts
    escalations: list[WaitingOperation]
    links: PageLinks


def operation_links(operation_id: uuid.UUID | str) -> OperationLinks:
    base = f"/v1/operations/{operation_id}"
    return OperationLinks(self=base, events=f"{base}/events")
