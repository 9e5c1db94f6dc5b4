"""Promises hold across doors (DESIGN.md invariant 18, issue 33): every door x every promise.

``CELLS`` is the one table: for each door and each promise either the test that holds
the door to the promise, or ``NotApplicable`` saying why it cannot apply. A door added
to ``DOORS`` without its cells fails the meta-test, and so does a promise. Each cell is
one test with the id ``door-promise``; tests/door_matrix_report.py prints the grid at
the end of the run (PASS / FAIL / FAIL* not delivered yet / n.a.), under xdist too.

A cell whose promise is not delivered yet is decorated ``@undelivered("what is missing")``
in its module: a strict xfail, so it shows FAIL* in the grid and fails the run the day
it starts passing, until the decoration is removed.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete

from jobwarden.config.settings import Settings
from jobwarden.console.app import create_app
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.schedule_tables import ScheduleRow
from jobwarden.tasks import runtime as runtime_module
from jobwarden.tasks.runtime import build_runtime
from jobwarden.tasks.runtime import close as close_runtime
from tests.api_server import serving
from tests.door_matrix_report import TABLE_PROPERTY
from tests.integration.api_helpers import tenant_name
from tests.integration.matrix import (
    attended,
    binding,
    breaker,
    follow_ups,
    hostile,
    identity,
    intake_log,
    keys,
    pauses,
    priority,
    references,
    tenant,
    two_person,
)
from tests.integration.matrix.doors import (
    HOOKS,
    HOOKS_SECRET_ENV,
    OTHER_HOOKS,
    OTHER_SECRET_ENV,
    SECRETS,
    Doors,
    write_providers,
)

DOORS = (
    "python",  # jobwarden.submit and the tasks.humans.interventions calls
    "celery",  # the jobwarden.submit Celery task's message
    "http",  # the /v1 API with a bearer token
    "mcp",  # the MCP tools with a token
    "cli",  # the jobwarden command
    "console",  # the operators' pages with a session
    "schedules",  # /v1/schedules and what the beat's tick fires
    "resubmit",  # a person's resubmission of a failed operation
    "webhooks",  # a provider's signed delivery
    "pauses",  # pause and resume (Python, HTTP, CLI): a decision over many operations
    "breaker",  # a provider breaker's show, hold and close (Python, HTTP, CLI)
    "follow_up",  # a capture, refund or rollback started from an operation (issue 40)
)
PROMISES = (
    "tenant",  # one tenant never sees or touches another's operations (invariant 12)
    "identity",  # the recorded author is the authenticated principal (invariant 15)
    "two_person",  # distinct principals, none the submitter or on-behalf-of (15)
    "binding",  # an approval binds the request as it will leave (13)
    "reserved_keys",  # keys jobwarden derives cannot be submitted (17)
    "intake_log",  # every submission answer is logged with its door and caller
    "no_500",  # hostile input is a refusal naming the field, never a crash
    "no_silent_wait",  # an answer says when no worker consumes the queue (issue 36, point 5)
    "immutable_refs",  # a moving name is refused, naming the field; the approval shows refs
    "priority",  # a submission's priority reaches its operation (issue 39, fair shares)
)


@dataclass(frozen=True, slots=True)
class NotApplicable:
    """A door the promise cannot apply to, and why (shown as n.a. in the grid)."""

    why: str


Cell = Callable[[Doors], None] | NotApplicable

# Every cell's tenants are named alike (api_helpers.tenant_name): "tenant-<hex>".
TENANT_PREFIX = tenant_name().rsplit("-", 1)[0] + "-"
_NEVER_DECIDES = "a {door} never decides: approvals are given through the approving doors"
CELLS: dict[tuple[str, str], Cell] = {
    # -- tenant ----------------------------------------------------------------------
    ("python", "tenant"): tenant.python,
    ("celery", "tenant"): tenant.celery,
    ("http", "tenant"): tenant.http,
    ("mcp", "tenant"): tenant.mcp,
    ("cli", "tenant"): tenant.cli,
    ("console", "tenant"): tenant.console,
    ("schedules", "tenant"): tenant.schedules,
    ("resubmit", "tenant"): tenant.resubmit,
    ("webhooks", "tenant"): tenant.webhooks,
    # -- identity --------------------------------------------------------------------
    ("python", "identity"): identity.python,
    ("celery", "identity"): NotApplicable(
        "Celery only submits, from services inside the trust boundary (the broker): no "
        "decision is taken through it; its submitter is logged as submitter:<requested_by>"
    ),
    ("http", "identity"): identity.http,
    ("mcp", "identity"): identity.mcp,
    ("cli", "identity"): identity.cli,
    ("console", "identity"): identity.console,
    ("schedules", "identity"): identity.schedules,
    ("resubmit", "identity"): identity.resubmit,
    ("webhooks", "identity"): identity.webhooks,
    # -- two-person rule ---------------------------------------------------------------
    ("python", "two_person"): two_person.python,
    ("celery", "two_person"): NotApplicable(_NEVER_DECIDES.format(door="Celery message")),
    ("http", "two_person"): two_person.http,
    ("mcp", "two_person"): NotApplicable(
        "the MCP tools never approve (start, get, cancel, list): an agent is not a person"
    ),
    ("cli", "two_person"): two_person.cli,
    ("console", "two_person"): two_person.console,
    ("schedules", "two_person"): two_person.schedules,
    ("resubmit", "two_person"): two_person.resubmit,
    ("webhooks", "two_person"): NotApplicable(_NEVER_DECIDES.format(door="webhook")),
    # -- approval bound to the request ---------------------------------------------------
    ("python", "binding"): binding.python,
    ("celery", "binding"): NotApplicable(_NEVER_DECIDES.format(door="Celery message")),
    ("http", "binding"): binding.http,
    ("mcp", "binding"): NotApplicable(
        "the MCP tools never approve; an agent reads the create request (get_operation) only"
    ),
    ("cli", "binding"): binding.cli,
    ("console", "binding"): binding.console,
    ("schedules", "binding"): NotApplicable(
        "a schedule never approves: what it fires waits for an approval through the "
        "approving doors, which bind it (their cells)"
    ),
    ("resubmit", "binding"): binding.resubmit,
    ("webhooks", "binding"): NotApplicable(_NEVER_DECIDES.format(door="webhook")),
    # -- intake log ------------------------------------------------------------------
    ("python", "intake_log"): intake_log.python,
    ("celery", "intake_log"): intake_log.celery,
    ("http", "intake_log"): intake_log.http,
    ("mcp", "intake_log"): intake_log.mcp,
    ("cli", "intake_log"): intake_log.cli,
    ("console", "intake_log"): intake_log.console,
    ("schedules", "intake_log"): intake_log.schedules,
    ("resubmit", "intake_log"): intake_log.resubmit,
    ("webhooks", "intake_log"): NotApplicable(
        "a webhook never submits: its delivery is recorded in webhook_deliveries and the "
        "operation's history"
    ),
    # -- reserved keys -----------------------------------------------------------------
    ("python", "reserved_keys"): keys.python,
    ("celery", "reserved_keys"): keys.celery,
    ("http", "reserved_keys"): keys.http,
    ("mcp", "reserved_keys"): keys.mcp,
    ("cli", "reserved_keys"): keys.cli,
    ("console", "reserved_keys"): NotApplicable(
        "the console takes no key: its one submission, a resubmit, uses the key jobwarden "
        "derives (the resubmit row holds that door to it)"
    ),
    ("schedules", "reserved_keys"): keys.schedules,
    ("resubmit", "reserved_keys"): keys.resubmit,
    ("webhooks", "reserved_keys"): NotApplicable(
        "a webhook never submits nor derives a key: it is matched to an operation by job id"
    ),
    # -- no 500 from input -----------------------------------------------------------------
    ("python", "no_500"): hostile.python,
    ("celery", "no_500"): hostile.celery,
    ("http", "no_500"): hostile.http,
    ("mcp", "no_500"): hostile.mcp,
    ("cli", "no_500"): hostile.cli,
    ("console", "no_500"): hostile.console,
    ("schedules", "no_500"): hostile.schedules,
    ("resubmit", "no_500"): hostile.resubmit,
    ("webhooks", "no_500"): hostile.webhooks,
    # -- no silent wait on a dead queue --------------------------------------------------
    ("python", "no_silent_wait"): attended.python,
    ("celery", "no_silent_wait"): attended.celery,
    ("http", "no_silent_wait"): attended.http,
    ("mcp", "no_silent_wait"): attended.mcp,
    ("cli", "no_silent_wait"): attended.cli,
    ("console", "no_silent_wait"): attended.console,
    ("schedules", "no_silent_wait"): NotApplicable(
        "a schedule's slots are submitted by the beat's tick task, which a worker runs: no "
        "one waits on that answer (/readyz and the console's banner tell the operator)"
    ),
    ("resubmit", "no_silent_wait"): attended.resubmit,
    ("webhooks", "no_silent_wait"): NotApplicable(
        "a webhook never submits: it is matched to an operation a worker already drives"
    ),
    # -- immutable references (issue 40) ---------------------------------------------------
    ("python", "immutable_refs"): references.python,
    ("celery", "immutable_refs"): references.celery,
    ("http", "immutable_refs"): references.http,
    ("mcp", "immutable_refs"): references.mcp,
    ("cli", "immutable_refs"): references.cli,
    ("console", "immutable_refs"): references.console,
    ("schedules", "immutable_refs"): references.schedules,
    ("resubmit", "immutable_refs"): references.resubmit,
    ("webhooks", "immutable_refs"): NotApplicable(
        "a webhook never submits a command: it is matched to an operation by job id"
    ),
    # -- priority at the rate limit ------------------------------------------------------
    ("python", "priority"): priority.python,
    ("celery", "priority"): priority.celery,
    ("http", "priority"): priority.http,
    ("mcp", "priority"): priority.mcp,
    ("cli", "priority"): priority.cli,
    ("console", "priority"): NotApplicable(
        "the console's one submission is a resubmit, which keeps the priority of the "
        "operation it replaces (the resubmit row)"
    ),
    ("schedules", "priority"): priority.schedules,
    ("resubmit", "priority"): priority.resubmit,
    ("webhooks", "priority"): NotApplicable("a webhook never submits"),
    # -- pause and resume (issue 39) ------------------------------------------------------
    ("pauses", "tenant"): pauses.tenant,
    ("pauses", "identity"): pauses.identity,
    ("pauses", "two_person"): NotApplicable(
        "a pause sends nothing and is undone by a resume: no second person is asked for"
    ),
    ("pauses", "binding"): NotApplicable("a pause approves no request: it holds them all"),
    ("pauses", "reserved_keys"): NotApplicable("a pause takes no idempotency key"),
    ("pauses", "intake_log"): NotApplicable(
        "a pause submits nothing: its record is the pauses row (who, why, when, who resumed) "
        "and the paused/resumed events in each operation's history"
    ),
    ("pauses", "no_500"): pauses.hostile,
    ("pauses", "no_silent_wait"): NotApplicable(
        "a pause submits nothing; what a resume wakes, the sweeper relays"
    ),
    # -- the provider breaker (issue 39) -------------------------------------------------
    ("breaker", "tenant"): breaker.tenant,
    ("breaker", "identity"): breaker.identity,
    ("breaker", "two_person"): NotApplicable(
        "holding or closing a breaker sends nothing itself: the resume is spread by the rate"
    ),
    ("breaker", "binding"): NotApplicable("a breaker approves no request: it holds them all"),
    ("breaker", "reserved_keys"): NotApplicable("a breaker takes no idempotency key"),
    ("breaker", "intake_log"): NotApplicable(
        "a breaker submits nothing: its record is the incident row and its pause row"
    ),
    ("breaker", "no_500"): breaker.hostile,
    ("breaker", "no_silent_wait"): NotApplicable(
        "a breaker submits nothing; what its close wakes, the sweeper relays"
    ),
    ("breaker", "immutable_refs"): NotApplicable("a breaker submits no command"),
    ("breaker", "priority"): NotApplicable("a breaker submits nothing: it parks what it covers"),
    # -- the follow-up door (issue 40) ---------------------------------------------------
    ("follow_up", "tenant"): follow_ups.tenant,
    ("follow_up", "identity"): follow_ups.identity,
    ("follow_up", "two_person"): NotApplicable(
        "a follow-up is started, never approved, here: its own approval goes through the "
        "approving doors, which hold the two-person rule (their cells)"
    ),
    ("follow_up", "binding"): NotApplicable(
        "a follow-up never approves: its own approval binds its create through the "
        "approving doors (their cells)"
    ),
    ("follow_up", "reserved_keys"): follow_ups.reserved_keys,
    ("follow_up", "intake_log"): follow_ups.intake_log,
    ("follow_up", "no_500"): follow_ups.no_500,
    ("follow_up", "no_silent_wait"): follow_ups.no_silent_wait,
    ("follow_up", "immutable_refs"): follow_ups.immutable_refs,
    ("follow_up", "priority"): NotApplicable(
        "a follow-up is submitted at the default priority: its doors take no priority yet "
        "(a capture or refund waits behind its tenant's higher priorities)"
    ),
    ("pauses", "immutable_refs"): NotApplicable("a pause submits no command"),
    ("pauses", "priority"): NotApplicable("a pause submits nothing: it parks whatever it covers"),
}


def _params() -> list[object]:
    out: list[object] = []
    for door in DOORS:
        for promise in PROMISES:
            cell = CELLS.get((door, promise))
            if cell is None or isinstance(cell, NotApplicable):
                continue
            missing = getattr(cell, "undelivered", None)
            marks = [pytest.mark.xfail(strict=True, reason=missing)] if missing else []
            out.append(pytest.param(door, promise, id=f"{door}-{promise}", marks=marks))
    return out


@pytest.fixture(scope="module")
def doors(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Doors]:
    providers = write_providers(Path(tmp_path_factory.mktemp("matrix_providers")))
    with pytest.MonkeyPatch.context() as env:
        env.setenv(HOOKS_SECRET_ENV, SECRETS[HOOKS])
        env.setenv(OTHER_SECRET_ENV, SECRETS[OTHER_HOOKS])
        settings = Settings(providers_dir=providers)
        rt = build_runtime(settings)
        try:
            with serving(create_app(settings)) as api:
                yield Doors(url=database_url, rt=rt, api=api, providers=providers)
        finally:
            close_runtime(rt)
            rt.redis.close()
            runtime_module.reset()
    assert HOOKS_SECRET_ENV not in os.environ


@pytest.fixture
def doors_forget_schedules(doors: Doors) -> Iterator[Doors]:
    """The cells' schedules are removed after each cell, so no later tick in this process
    (another file's, or a beat's) fires or counts their slots."""
    yield doors
    with transaction(doors.url) as session:
        session.execute(delete(ScheduleRow).where(ScheduleRow.tenant.like(f"{TENANT_PREFIX}%")))


def test_every_door_has_a_cell_for_every_promise(record_property: Callable[..., None]) -> None:
    missing = [(d, p) for d in DOORS for p in PROMISES if (d, p) not in CELLS]
    unknown = [cell for cell in CELLS if cell[0] not in DOORS or cell[1] not in PROMISES]
    # The grid's shape travels to the report plugin with this test's report.
    na = {f"{d}-{p}": c.why for (d, p), c in CELLS.items() if isinstance(c, NotApplicable)}
    record_property(TABLE_PROPERTY, {"doors": DOORS, "promises": PROMISES, "na": na})
    assert missing == [], f"cells missing from CELLS (a test or NotApplicable): {missing}"
    assert unknown == []
    for door, promise in CELLS:
        # The report plugin reads the grid back from the test ids (door-promise).
        assert re.fullmatch(r"[a-z0-9_]+", door + promise), (door, promise)


@pytest.mark.parametrize(("door", "promise"), _params())
def test_the_door_keeps_the_promise(doors_forget_schedules: Doors, door: str, promise: str) -> None:
    cell = CELLS[(door, promise)]
    assert not isinstance(cell, NotApplicable)
    cell(doors_forget_schedules)
