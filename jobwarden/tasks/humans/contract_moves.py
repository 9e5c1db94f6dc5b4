"""Moving running operations to the current contract: a person's recorded decision.

A changed contract applies to new operations only (invariant 16). Moving a running
one to it is explicit: ``jobwarden providers migrate <provider> --to current``
records, per operation, a ``decision`` event naming both digests and its author,
and the row's ``contract_digest`` changes in the same fenced write (so the chain
binds it). The current text is kept first, so every digest a row names has its text.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from jobwarden.models.actions import Decided, Record
from jobwarden.models.contracts.pins import short_digest
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.identity import Author, AuthorKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import contract_store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import TERMINAL
from jobwarden.tasks.runtime import Runtime, current, utcnow
from jobwarden.tasks.steps import Writer, under_lease

# As a person's other interventions (tasks/humans/interventions.py): the history's prefix, and
# how many lost fenced races one move retries before it reports the operation skipped.
HUMAN = "human:"
ATTEMPTS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    """One operation the decision moved: from which contract to which."""

    operation_id: uuid.UUID
    from_digest: str | None
    to_digest: str
    state: str


def move_to_current(
    provider: str,
    *,
    author: Author,
    operation_id: uuid.UUID | None = None,
    tenant: str | None = None,
    runtime: Runtime | None = None,
) -> list[Moved]:
    """Move the provider's operations not yet ended (or just ``operation_id``; only
    ``tenant``'s when given: a token acts for its own tenant) to its current contract,
    each a recorded decision by ``author``; returns those moved.

    RefusedInputError naming the field when the provider is not configured here, or
    ``operation_id`` is no running operation of the provider that uses another
    contract. An operation that ended meanwhile is left as it is.
    """
    rt = runtime or current()
    if provider not in rt.versions:
        raise RefusedInputError(f"provider: no contract named {provider!r} is configured here")
    version = rt.version(provider)
    with transaction(rt.settings.database_url) as session:
        contract_store.keep(
            session, digest=version.digest, provider=provider, text=version.text, now=utcnow()
        )
        found = contract_store.not_under(
            session, provider, version.digest, operation_id, tenant=tenant
        )
    if operation_id is not None and not found:
        raise RefusedInputError(
            f"operation: {operation_id} is no running {provider} operation under another "
            f"contract than the current {short_digest(version.digest)}"
        )
    writer = Writer(
        actor=f"{HUMAN}{author.actor}",
        # A break-glass move says so, and why, in every event it writes (invariant 15).
        excerpt=author.excerpt() if author.kind is AuthorKind.break_glass else None,
        wait_seconds=rt.settings.intervention_wait_seconds or rt.settings.lease_ttl_seconds,
        lease_required=False,
        attempts=ATTEMPTS,
    )
    moved = []
    for op_id in found:

        def decide(op: Operation, now: datetime) -> Decided | None:
            if op.state in TERMINAL or op.contract_digest == version.digest:
                return None  # it ended, or someone moved it, since it was listed
            cause = (
                f"contract moved from {short_digest(op.contract_digest)} to "
                f"{short_digest(version.digest)} by decision"
            )
            excerpt = {
                "decision": "contract_moved",
                "from_contract_digest": op.contract_digest,
                "contract_digest": version.digest,
            }
            record = Record(event=EventKind.decision, cause=cause, excerpt=excerpt)
            return Decided(action=record, changes={"contract_digest": version.digest})

        written = under_lease(rt, op_id, decide, writer)
        if written is not None and written.stored is not written.found:
            moved.append(
                Moved(
                    operation_id=op_id,
                    from_digest=written.found.contract_digest,
                    to_digest=version.digest,
                    state=written.stored.state.value,
                )
            )
    return moved
