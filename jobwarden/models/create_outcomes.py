"""What a create's answer says about the remote job: accepted, refused, or not known.

Pure: the classified HTTP signal and the job ids in, one ``CreateOutcome`` out.
``create_decisions`` turns an outcome into the step's action; keeping the reading
apart from the decision lets the table of answers be tested on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from jobwarden.models.provider.signals import HttpSignal, SignalKind


class CreateOutcomeKind(StrEnum):
    accepted = "accepted"  # 2xx with a usable job id: move to accepted
    ambiguous = "ambiguous"  # the create may or may not exist: create_unknown, same token
    refused = "refused"  # the provider refused; nothing was created: failed
    authorization_denied = "authorization_denied"  # 401/403: escalate, never retry as is
    rate_limited = "rate_limited"  # 429: nothing created; retry the same token after Retry-After
    in_flight = "in_flight"  # the provider is still processing our token: same token, later
    contract_violation = "contract_violation"  # conflict on our own token, or a second job id


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateOutcome:
    kind: CreateOutcomeKind
    retry_after: float | None  # seconds, when the provider sent a valid Retry-After
    detail: str


def decide_after_create(
    signal: HttpSignal,
    *,
    job_id: str | None,
    known_job_id: str | None,
    in_flight: bool = False,
    accepted: bool = True,
) -> CreateOutcome:
    """Classify a create (or same-token reconciliation) answer. Never raises.

    ``job_id`` is what the edge extracted as the contract says; ``known_job_id``
    is a job id already recorded for this operation, if any. Anything that may
    have created a job without telling us which is ``ambiguous``: the caller
    reconciles with the same token and never mints a fresh one. ``in_flight`` says
    the contract reads this conflict as "still processing our token"; ``accepted``
    that the 2xx is one the contract lists as accepted (any other 2xx is ambiguous).
    """
    kind = signal.kind
    code = signal.status_code
    retry_after = signal.retry_after.seconds if signal.retry_after.valid else None

    def outcome(k: CreateOutcomeKind, detail: str) -> CreateOutcome:
        return CreateOutcome(kind=k, retry_after=retry_after, detail=detail)

    if kind in (SignalKind.ok, SignalKind.accepted):
        if not accepted:
            return outcome(CreateOutcomeKind.ambiguous, f"http_{code} not an accepted status")
        if not job_id:
            return outcome(CreateOutcomeKind.ambiguous, f"http_{code} without a usable job id")
        if known_job_id is not None and job_id != known_job_id:
            return outcome(
                CreateOutcomeKind.contract_violation,
                f"job id {job_id!r} differs from known job id {known_job_id!r} for the same token",
            )
        return outcome(CreateOutcomeKind.accepted, f"http_{code}")
    if kind in (SignalKind.transport, SignalKind.server_error, SignalKind.malformed):
        failure = signal.transport_failure or f"http_{code}"
        return outcome(CreateOutcomeKind.ambiguous, f"{kind}: {failure}")
    if kind in (SignalKind.unauthorized, SignalKind.forbidden):
        return outcome(CreateOutcomeKind.authorization_denied, f"http_{code}")
    if kind is SignalKind.rate_limited:
        return outcome(CreateOutcomeKind.rate_limited, "http_429")
    if kind is SignalKind.conflict and in_flight:
        return outcome(CreateOutcomeKind.in_flight, f"http_{code}: still processing our token")
    if kind is SignalKind.conflict:
        return outcome(
            CreateOutcomeKind.contract_violation,
            f"http_{code} for our own token: same token, different request",
        )
    return outcome(CreateOutcomeKind.refused, f"http_{code}")
