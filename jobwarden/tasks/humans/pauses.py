"""Pause and resume: a provider (all of it, or one tenant's share) or one operation.

The one function every door calls (Python, CLI, HTTP API, console, MCP). A pause is
recorded first (its row commits: from then on every step's snapshot carries the hold and
sends nothing); then each operation it covers is parked through ``steps.under_lease``,
waiting for a step in flight to let go, so once ``pause_*`` returns no request that was
decided before the pause can still leave. An operation the parking has not reached yet
parks itself at its next step (the planner's check), so a crash mid-way loses nothing.

A resume marks the pause ended, then wakes each operation it parked at a time spread by
the provider's rate limit (``models/humans/pauses.resume_time``); the timers are relayed
by the sweeper in batches, never one message each at once. The author is an ``Author``
(models/humans/identity.py) or a ``Rule`` (a provider breaker, later), recorded on the
pause row and on every event the pause writes.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from jobwarden.models.actions import Decided
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.identity import HUMAN, Author, AuthorKind, as_author
from jobwarden.models.humans.pauses import (
    Pause,
    Rule,
    checked_reason,
    park,
    resume_time,
    resumed,
)
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import pause_store, store
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.runtime import Runtime, current, utcnow
from jobwarden.tasks.steps import Decide, Writer, under_lease

log = get_logger("jobwarden.pauses")
# Operations parked or woken per read of the pause's scope (keyset batches).
BATCH = 200
# A person's write retries this many lost fenced races (as interventions.HUMAN_ATTEMPTS).
ATTEMPTS = 5


@dataclass(frozen=True, slots=True, kw_only=True)
class Paused:
    """What a pause did: the pause (new, or the one already holding that scope)."""

    pause: Pause
    started: bool  # False: that scope was already paused; this is the pause holding it
    parked: int  # operations parked by this call


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumed:
    pause: Pause
    woken: int  # operations woken (spread by the provider's rate)


Who = Author | Rule | str


def _who(who: Who) -> tuple[str, str, Author | None]:
    """(actor, kind, author): the pause row's author, and the person, if one."""
    if isinstance(who, Rule):
        return who.actor, "rule", None
    author = as_author(who, "paused_by")
    return author.actor, author.kind.value, author


def _writer(rt: Runtime, actor: str, author: Author | None) -> Writer:
    glass = author is not None and author.kind is AuthorKind.break_glass
    return Writer(
        actor=f"{HUMAN}{actor}" if author is not None else actor,
        wait_seconds=rt.settings.intervention_wait_seconds or rt.settings.lease_ttl_seconds,
        lease_required=False,
        attempts=ATTEMPTS,
        excerpt=author.excerpt() if author is not None and glass else None,
    )


def pause_provider(  # noqa: PLR0913 - every door names these
    provider: str,
    reason: str,
    paused_by: Who,
    *,
    tenant: str | None = None,
    evidence: Mapping[str, Any] | None = None,
    extend: bool = False,
    runtime: Runtime | None = None,
) -> Paused:
    """Pause every operation at ``provider`` (``tenant``: only that tenant's).

    RefusedInputError for an unknown provider or an empty reason. Pausing a scope
    already paused returns the pause holding it (``started`` False), unchanged.
    ``extend``: each observing operation it covers also gets the bounded extend option
    (once per operation: +15 min on its result deadline, +4 checks), for the time it will
    be paused; the business deadline is never moved.
    """
    rt = runtime or current()
    if provider not in rt.contracts:
        raise RefusedInputError(f"provider: no provider {provider!r}")
    return _pause(
        rt,
        provider,
        tenant=tenant,
        operation_id=None,
        reason=reason,
        paused_by=paused_by,
        evidence=evidence,
        extend=extend,
    )


def pause_operation(  # noqa: PLR0913 - every door names these
    operation_id: str,
    reason: str,
    paused_by: Who,
    *,
    tenant: str | None = None,
    extend: bool = False,
    runtime: Runtime | None = None,
) -> Paused:
    """Pause one operation. ``tenant``: the caller's (another tenant's is not found);
    ``extend``: as for ``pause_provider``."""
    rt = runtime or current()
    op = _owned(rt, operation_id, tenant)
    return _pause(
        rt,
        op.provider,
        tenant=op.tenant,
        operation_id=op.operation_id,
        reason=reason,
        paused_by=paused_by,
        evidence=None,
        extend=extend,
    )


def _owned(rt: Runtime, operation_id: str, tenant: str | None) -> Operation:
    try:
        op_id = uuid.UUID(operation_id)
    except ValueError:
        raise RefusedInputError(f"operation: {operation_id!r} is not an operation id") from None
    with snapshot(rt.settings.database_url) as session:
        op = store.load(session, op_id)
    if op is None or (tenant is not None and op.tenant != tenant):
        raise RefusedInputError(f"no operation {operation_id}")
    return op


def _pause(  # noqa: PLR0913 - the pause's own facts, each named at the two calls
    rt: Runtime,
    provider: str,
    *,
    tenant: str | None,
    operation_id: uuid.UUID | None,
    reason: str,
    paused_by: Who,
    evidence: Mapping[str, Any] | None,
    extend: bool,
) -> Paused:
    actor, kind, author = _who(paused_by)
    text = checked_reason(reason)
    with transaction(rt.settings.database_url) as tx:
        pause, started = pause_store.start(
            tx,
            provider=provider,
            tenant=tenant,
            operation_id=operation_id,
            reason=text,
            evidence=evidence,
            author=actor,
            author_kind=kind,
            now=utcnow(),
        )
        if started:
            pause_store.tell(tx, pause)
    parked = park_covered(rt, pause, _writer(rt, actor, author), extend=extend)
    log.warning(
        "pause_started" if started else "pause_already_active",
        pause_id=str(pause.pause_id),
        provider=provider,
        tenant=tenant,
        operation_id=str(operation_id) if operation_id else None,
        actor=actor,
        reason=text,
        parked=parked,
    )
    return Paused(pause=pause, started=started, parked=parked)


def park_covered(rt: Runtime, pause: Pause, writer: Writer, *, extend: bool = False) -> int:
    """Park every operation ``pause`` covers, a batch at a time; returns how many
    (``extend``: each also gets the bounded extend option, see ``pause_provider``).

    Each waits for a step in flight to let go of its lease, so none decided before the
    pause is still about to send when this returns. A resume that lands meanwhile stops it.
    """
    hold = pause.as_hold()
    parked = 0
    after: uuid.UUID | None = None
    while True:
        with snapshot(rt.settings.database_url) as session:
            batch = pause_store.covered(session, pause, after=after, limit=BATCH)
            current_pause = pause_store.get(session, pause.pause_id)
        if not batch or current_pause is None or not current_pause.active:
            return parked
        for op_id in batch:

            def decide(op: Operation, now: datetime) -> Decided | None:
                return park(op, hold, now, extend=extend)

            written = _written(rt, op_id, decide, writer)
            parked += int(written)
        after = batch[-1]


def _written(rt: Runtime, op_id: uuid.UUID, decide: Decide, writer: Writer) -> bool:
    """One fenced write; False when it lost every race (the operation's own next step then
    decides over the pause, which its snapshot carries) or wrote nothing."""
    try:
        done = under_lease(rt, op_id, decide, writer)
    except LostRaceError:
        log.info("pause_write_lost_race", operation_id=str(op_id))
        return False
    return done is not None and done.stored is not done.found


def resume(  # noqa: PLR0913 - every door names these
    pause_id: str,
    resumed_by: Author | str,
    note: str = "",
    *,
    tenant: str | None = None,
    extend: bool = False,
    runtime: Runtime | None = None,
) -> Resumed:
    """End a pause and wake every operation it parked, spread by the provider's rate.

    ``extend``: each observing operation also gets the bounded extend option (once per
    operation: +15 min on its result deadline, +4 checks), for the time it was paused.

    ``tenant``: the caller's; a pause of another tenant's share (or of every tenant's,
    which only an operator resumes: the doors check that) is not found. RefusedInputError
    when there is no such pause.
    """
    rt = runtime or current()
    author = as_author(resumed_by, "resumed_by")
    try:
        pid = uuid.UUID(pause_id)
    except ValueError:
        raise RefusedInputError(f"pause: {pause_id!r} is not a pause id") from None
    words = note.strip() or None
    if words is not None and (len(words) > 2000 or not words.isprintable()):
        raise RefusedInputError("note: at most 2000 printable characters")
    with transaction(rt.settings.database_url) as tx:
        found = pause_store.get(tx, pid)
        if found is None or (tenant is not None and found.tenant != tenant):
            raise RefusedInputError(f"no pause {pause_id}")
        ended = pause_store.end(tx, pid, resumed_by=author.actor, note=words, now=utcnow())
    # Resuming a resumed pause wakes whatever it left parked (a resume cut short by a
    # crash or a restart is finished by asking again), and otherwise changes nothing.
    ended = ended or found
    woken = wake_parked(rt, ended, _writer(rt, author.actor, author), author.actor, extend=extend)
    log.warning(
        "pause_resumed",
        pause_id=pause_id,
        provider=ended.provider,
        tenant=ended.tenant,
        actor=author.actor,
        woken=woken,
    )
    return Resumed(pause=ended, woken=woken)


def wake_parked(
    rt: Runtime, pause: Pause, writer: Writer, resumed_by: str, *, extend: bool = False
) -> int:
    """Wake every operation ``pause`` parked, the ``i``-th at ``resume_time(i)``."""
    contract = rt.contracts.get(pause.provider)
    rate = (
        contract.rate_limit.requests_per_second
        if contract is not None and contract.rate_limit is not None
        else None
    )
    started = utcnow()
    woken = 0
    after: uuid.UUID | None = None
    while True:
        with snapshot(rt.settings.database_url) as session:
            batch = pause_store.parked_by(session, pause.pause_id, after=after, limit=BATCH)
        if not batch:
            return woken
        for op_id in batch:
            at = resume_time(woken, now=started, rate=rate, u=rt.jitter())

            def decide(op: Operation, now: datetime, at: datetime = at) -> Decided | None:
                return resumed(
                    op, pause.pause_id, at=at, resumed_by=resumed_by, now=now, extend=extend
                )

            woken += int(_written(rt, op_id, decide, writer))
        after = batch[-1]


def pauses(
    *,
    active_only: bool = True,
    provider: str | None = None,
    tenant: str | None = None,
    runtime: Runtime | None = None,
) -> list[Pause]:
    """Pauses, newest first; ``tenant``: those that hold its operations."""
    rt = runtime or current()
    with snapshot(rt.settings.database_url) as session:
        return pause_store.listed(
            session, active_only=active_only, provider=provider, tenant=tenant
        )


def find_pause(pause_id: uuid.UUID, *, runtime: Runtime | None = None) -> Pause | None:
    """One pause, active or resumed; None when there is none."""
    rt = runtime or current()
    with snapshot(rt.settings.database_url) as session:
        return pause_store.get(session, pause_id)


def parked_counts(runtime: Runtime | None = None) -> dict[str, int]:
    """Operations parked by a pause, per provider."""
    rt = runtime or current()
    with snapshot(rt.settings.database_url) as session:
        return pause_store.parked_counts(session)
