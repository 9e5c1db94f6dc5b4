"""Acceptance fixtures: the sandbox provider over HTTP, real Celery worker
processes and a real beat, against the run's scratch database and key prefix.

Test contracts are copies of the shipped sandbox contract with short
timeouts, plus variants (strict 404, unreachable host, lookup reconciliation).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import socket
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jobwarden.demo.harness import REPO, Stack, wait_for
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL
from tests.integration.notify_helpers import Receiver, receiving
from tests.spector_server import SpectorServer

TOKEN = secrets.token_hex(8)
# The sandbox signs its webhooks with this; sandbox_hooks* contracts read it (test_webhooks.py).
WEBHOOK_SECRET = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
STOPPED = {s.value for s in TERMINAL | AUTOMATION_STOPPED}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _variant(base: str, name: str, **fields: str) -> str:
    text = base.replace('name = "sandbox"', f'name = "{name}"')
    for key, value in fields.items():
        text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert count == 1, key
    return text


@pytest.fixture(scope="session")
def providers_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    base = _variant(
        base,
        "sandbox",
        request_timeout_seconds="2",
        initial_delay_seconds="0.1",
        base_seconds="0.1",
        max_seconds="1",
        rate_limit_base_seconds="0.3",
    )
    out = tmp_path_factory.mktemp("providers")
    (out / "sandbox.toml").write_text(base)
    (out / "sandbox_strict404.toml").write_text(
        _variant(base, "sandbox_strict404", not_found_grace_seconds="0")
    )
    (out / "sandbox_lookup.toml").write_text(
        _variant(base, "sandbox_lookup").replace(
            'path = "same_token_retry"',
            'path = "lookup_by_reference"\n'
            'lookup_path = "/v1/jobs?reference={token}"\n'
            'lookup_job_id_pointer = "/data/0/id"',
        )
    )
    (out / "sandbox_noreconcile.toml").write_text(
        _variant(base, "sandbox_noreconcile").replace('path = "same_token_retry"', 'path = "none"')
    )
    (out / "sandbox_nocred.toml").write_text(
        _variant(base, "sandbox_nocred").replace(
            'secret_env = "JOBWARDEN_SANDBOX_TOKEN"', 'secret_env = "JOBWARDEN_NOT_SET_TOKEN"'
        )
    )
    # Partial output after a cancel (test_result_artifacts.py): collected, labelled partial.
    (out / "sandbox_partial.toml").write_text(
        _variant(base, "sandbox_partial", max_failed_fraction='0.5\npartial_after = ["cancelled"]')
    )
    # What a failed or cancelled job leaves, removed by one DELETE and confirmed by a
    # GET answering 404 (ARM RPC "Delete Resource Asynchronously"; test_cleanup.py).
    cleanup = (
        "[cleanup]\n"
        'after = ["failed", "cancelled", "expired"]\n'
        'method = "DELETE"\n'
        'path = "/v1/jobs/{job_id}/resources"\n'
        'check_path = "/v1/jobs/{job_id}/resources"\n'
        "deadline_seconds = 8\n\n"
        "[reconciliation]"
    )
    (out / "sandbox_cleanup.toml").write_text(
        _variant(base, "sandbox_cleanup").replace("[reconciliation]", cleanup, 1)
    )
    # A cleanup nobody confirms stops at its deadline: a short one, so the test is short.
    (out / "sandbox_cleanup_short.toml").write_text(
        _variant(base, "sandbox_cleanup_short").replace(
            "[reconciliation]", cleanup.replace("deadline_seconds = 8", "deadline_seconds = 3"), 1
        )
    )
    (out / "sandbox_approval.toml").write_text(
        _variant(base, "sandbox_approval", requires_approval="true")
    )
    # The two-person rule (test_human.py): two distinct approvers before the create.
    (out / "sandbox_two_approvers.toml").write_text(
        _variant(base, "sandbox_two_approvers", requires_approval="true\napprovals_required = 2")
    )
    # The approval window (test_human.py): a create deadline a wait for approval outlasts,
    # and a window that closes before anybody approves.
    (out / "sandbox_approval_short.toml").write_text(
        _variant(
            base, "sandbox_approval_short", requires_approval="true", create_deadline_seconds="3"
        )
    )
    (out / "sandbox_approval_window.toml").write_text(
        _variant(base, "sandbox_approval_window", requires_approval="true").replace(
            "[limits]", "[limits]\napproval_window_seconds = 1", 1
        )
    )
    # One credential limited to 5 requests/s with a burst of 2 (test_flow_limits.py).
    (out / "sandbox_ratelimited.toml").write_text(
        _variant(base, "sandbox_ratelimited").replace(
            "[limits]", "[rate_limit]\nrequests_per_second = 5\nburst = 2\n\n[limits]", 1
        )
    )
    # A tight limit shared by tenants (test_fair_shares.py): 20 requests/s, no burst.
    (out / "sandbox_fair.toml").write_text(
        _variant(base, "sandbox_fair").replace(
            "[limits]", "[rate_limit]\nrequests_per_second = 20\nburst = 1\n\n[limits]", 1
        )
    )
    # A provider of its own for pause and resume (test_pauses.py): pausing it over every
    # tenant holds no other test's operations; 4 requests/s, one at a time.
    (out / "sandbox_pausable.toml").write_text(
        _variant(base, "sandbox_pausable").replace(
            "[limits]", "[rate_limit]\nrequests_per_second = 4\nburst = 1\n\n[limits]", 1
        )
    )
    # The provider breaker (test_breaker.py): a breaker on a short window, a budget of six
    # transport failures that an operation alone would exhaust in the outage, no result
    # document (so a recovered operation costs two requests), 40 requests/s one at a time.
    # Six, not four: on a loaded machine the first operation created in the outage spent
    # four failures (its backoff, about 2 s) before the other operations' first answers
    # reached the breaker's minimum count; the breaker's race is with one operation's
    # backoff, and six failures double it while the outage still outlasts them.
    breaker = _variant(
        base, "sandbox_breaker", max_transport_failures="6", create_deadline_seconds="600"
    ).replace(
        "[limits]",
        "[rate_limit]\nrequests_per_second = 40\nburst = 1\n\n"
        "[breaker]\nwindow_seconds = 5\nminimum_count = 20\ncooldown_seconds = 1\n\n"
        "[limits]",
        1,
    )
    breaker = re.sub(r"(?ms)^\[result\]\n.*?\n\n", "", breaker, count=1)
    breaker = breaker.replace('result_ref_pointer = "/result/url"\n', "")
    (out / "sandbox_breaker.toml").write_text(breaker)
    unreachable = _variant(
        base, "sandbox_unreachable", base_url=f'"http://127.0.0.1:{_free_port()}"'
    )
    unreachable = unreachable.replace(
        'base_url_env = "JOBWARDEN_SANDBOX_URL"', 'base_url_env = "JOBWARDEN_UNREACHABLE_URL"'
    )
    (out / "sandbox_unreachable.toml").write_text(unreachable)
    # The public conventions the sandbox models on request: a UUID token with
    # Repeatability-First-Sent (OASIS Repeatable Requests / Azure), and error codes that say
    # what a failure really is (Azure OperationTimedOut, AIP-151 google.rpc.Code).
    conventions = (
        _variant(base, "sandbox_conventions")
        .replace(
            'token_name = "Idempotency-Key"',
            'token_name = "Idempotency-Key"\ntoken_format = "uuid"\n'
            'first_sent_header = "Repeatability-First-Sent"',
        )
        .replace(
            'state_pointer = "/status"',
            'state_pointer = "/status"\nerror_code_pointer = "/error/code"',
        )
        .replace("[cancel]", '[states.error_codes]\nOperationTimedOut = "expired"\n\n[cancel]', 1)
    )
    (out / "sandbox_conventions.toml").write_text(conventions)
    # Webhooks (test_webhooks.py): a backoff so long that only a webhook explains a prompt
    # status read; Standard Webhooks and the hmac scheme, the sandbox's secret for both.
    for name, table in WEBHOOK_VARIANTS.items():
        hooks = _variant(base, name, base_seconds="20", max_seconds="30")
        (out / f"{name}.toml").write_text(hooks.replace("[poll]", table + "\n[poll]", 1))
    # Result conventions (test_result_conventions.py): digest fields on the download and
    # the three per-item shapes, each a sandbox variant with its own [result] table.
    head, rest = base.split("[result]\n", 1)
    tail = rest[rest.index("[poll]") :]
    for name, table in RESULT_VARIANTS.items():
        (out / f"{name}.toml").write_text(_variant(head, name) + table + "\n" + tail)
    # Download conventions (test_download_conventions.py): a presigned URL's end read from
    # the status body, with and without a fresh URL on the next status read; a one-time link.
    for name, extra in DOWNLOAD_VARIANTS.items():
        (out / f"{name}.toml").write_text(
            _variant(base, name).replace("[result]\n", "[result]\n" + extra, 1)
        )
    _spector_contracts(out)
    # Issue 40's follow-ups (test_follow_ups.py): the sandbox's payments and deploy shapes.
    shipped = REPO / "config" / "providers"
    for name in FOLLOW_UP_CONTRACTS:
        (out / f"{name}.toml").write_text(_fast_polls((shipped / f"{name}.toml").read_text()))
        schema = f"{name}.command.schema.json"
        (out / schema).write_text((shipped / schema).read_text())
    return out


FOLLOW_UP_CONTRACTS = (
    "sandbox_payments",
    "sandbox_capture",
    "sandbox_refund",
    "sandbox_deploy",
    "sandbox_rollback",
)


def _fast_polls(text: str) -> str:
    """A shipped contract with the acceptance tests' short waits (the mocks ask Retry-After 1)."""
    for key, value in (
        ("initial_delay_seconds", "0.1"),
        ("base_seconds", "0.1"),
        ("max_seconds", "1"),
        ("request_timeout_seconds", "2"),
    ):
        text, count = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert count == 1, key
    return text


def _spector_contracts(out: Path) -> None:
    """The shipped Azure contracts, pointed at Microsoft's TypeSpec mocks (tests/spector) by
    their base_url_env, plus the RPC API of azure/core/lro/rpc as an azure_lro variant."""
    providers = REPO / "config" / "providers"
    arm = _fast_polls((providers / "azure_arm.toml").read_text())
    (out / "azure_arm.toml").write_text(arm)
    lro = _fast_polls((providers / "azure_lro.toml").read_text())
    (out / "azure_lro.toml").write_text(lro)
    rpc = lro.replace('name = "azure_lro"', 'name = "azure_lro_rpc"').replace(
        'base_url_env = "JOBWARDEN_AZURE_URL"', 'base_url_env = "JOBWARDEN_AZURE_RPC_URL"'
    )
    rpc, count = re.subn(
        r'(?m)^path = "/\{command.collection\}/\{command.name\}:.*$',
        'path = "/generations:submit?api-version=2022-12-01-preview"',
        rpc,
    )
    assert count == 1
    (out / "azure_lro_rpc.toml").write_text(rpc)


@pytest.fixture(scope="session")
def spector() -> Iterator[SpectorServer]:
    """Microsoft's TypeSpec scenario mocks (installed by scripts/install_spector)."""
    with SpectorServer() as server:
        yield server


WEBHOOK_VARIANTS = {
    "sandbox_hooks": """[webhook]
scheme = "standard"
job_id_pointer = "/job/id"
secret_env = "JOBWARDEN_SANDBOX_WEBHOOK_SECRET"
tolerance_seconds = 300
""",
    "sandbox_hooks_hmac": """[webhook]
scheme = "hmac"
signature_header = "X-Sandbox-Signature"
timestamp_header = "X-Sandbox-Timestamp"
event_id_pointer = "/id"
job_id_pointer = "/job/id"
secret_env = "JOBWARDEN_SANDBOX_WEBHOOK_SECRET"
tolerance_seconds = 300
""",
}


DOWNLOAD_VARIANTS = {
    "sandbox_presigned": 'url_expiry_pointer = "/result/expires_at"\nrefresh_expired_url = true\n',
    "sandbox_presigned_once": 'url_expiry_pointer = "/result/expires_at"\n',
    "sandbox_single_use": "single_use = true\n",
}


RESULT_VARIANTS = {
    # No status-body checksum: the digest fields are the only integrity check.
    "sandbox_digests": """[result]
fetch = "url"
content_type = "application/json"
digests = ["repr-digest", "content-digest", "content-md5", "x-goog-hash"]
items_pointer = "/items"
failed_items_pointer = "/failed_items"
""",
    "sandbox_azure_items": """[result]
fetch = "url"
content_type = "application/json"
items_pointer = "/value"
item_status_pointer = "/status"
item_failed_values = ["Failed", "ValidationFailed"]
item_succeeded_values = ["Succeeded"]
item_ref_pointer = "/id"
""",
    "sandbox_google_items": """[result]
fetch = "url"
content_type = "application/jsonl"
jsonl = true
item_error_pointer = "/error"
item_ref_pointer = "/key"
""",
    "sandbox_openai_items": """[result]
fetch = "url"
content_type = "application/jsonl"
jsonl = true
item_error_pointer = "/error"
item_status_code_pointer = "/response/status_code"
item_ref_pointer = "/custom_id"
completed_count_pointer = "/request_counts/completed"
failed_count_pointer = "/request_counts/failed"
total_count_pointer = "/request_counts/total"
error_file_pointer = "/error_file_id"
""",
}
# The OpenAI Files API for the failed requests' lines (error_file_id), as openai_batch has it.
RESULT_VARIANTS["sandbox_openai_files"] = (
    RESULT_VARIANTS["sandbox_openai_items"] + 'error_file_path = "/v1/files/{error_file}/content"\n'
)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[SandboxServer]:
    server = SandboxServer(token=TOKEN, webhook_secret=WEBHOOK_SECRET)
    server.start()
    yield server
    server.stop()


# The tenant whose operations notify a receiver (tests/acceptance/test_notifications.py);
# every other tenant has no target, so its outbox rows end no_target.
NOTIFIED_TENANT = "acceptance-notified"
NOTIFY_SECRET = "whsec_" + base64.b64encode(b"acceptance-notification-secret!!").decode()


@pytest.fixture(scope="session")
def notification_receiver() -> Iterator[Receiver]:
    """A real HTTP receiver for the workers' notification relay, for the whole session."""
    with receiving() as receiver:
        yield receiver


@pytest.fixture(scope="session")
def notifications_file(
    tmp_path_factory: pytest.TempPathFactory, notification_receiver: Receiver
) -> Path:
    path = tmp_path_factory.mktemp("notify") / "notifications.toml"
    path.write_text(
        f"[tenants.{NOTIFIED_TENANT}]\n"
        f'url = "{notification_receiver.url}/hook"\n'
        'secret_env = "JW_ACCEPTANCE_NOTIFY_SECRET"\n'
    )
    return path


@pytest.fixture(scope="package")
def worker_env(
    database_url: str,
    sandbox: SandboxServer,
    providers_dir: Path,
    spector: SpectorServer,
    notifications_file: Path,
) -> Iterator[dict[str, str]]:
    """The workers' settings, also this process's for the package: restored afterwards, so
    the tests that run after acceptance (integration, unit) see the shipped contracts and
    default bounds, not these variants and this short lease."""
    env = {
        "JOBWARDEN_DATABASE_URL": database_url,
        "JOBWARDEN_SANDBOX_URL": sandbox.url,
        "JOBWARDEN_SANDBOX_TOKEN": TOKEN,
        "JOBWARDEN_SANDBOX_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "JOBWARDEN_PROVIDERS_DIR": str(providers_dir),
        "JOBWARDEN_MAX_COUNTDOWN_SECONDS": "3",
        "JOBWARDEN_VISIBILITY_TIMEOUT_SECONDS": "60",
        "JOBWARDEN_SWEEP_INTERVAL_SECONDS": "0.5",
        "JOBWARDEN_REDISPATCH_AFTER_SECONDS": "3",
        "JOBWARDEN_LEASE_TTL_SECONDS": "5",
        "JOBWARDEN_FAULTS_ENABLED": "1",
        "JOBWARDEN_AZURE_ARM_URL": spector.url,
        "JOBWARDEN_AZURE_URL": spector.url + "/azure/core/lro/standard",
        "JOBWARDEN_AZURE_RPC_URL": spector.url + "/azure/core/lro/rpc",
        # The mocks check no credential; the contracts still require one by reference.
        "JOBWARDEN_AZURE_ARM_TOKEN": TOKEN,
        "JOBWARDEN_AZURE_KEY": TOKEN,
        # Beat's relay delivers the outbox to the session's receiver (one tenant has it).
        "JOBWARDEN_NOTIFICATIONS_FILE": str(notifications_file),
        "JOBWARDEN_NOTIFY_INTERVAL_SECONDS": "0.5",
        # Schedules (test_schedules.py): beat rings the tick twice a second, and a slot
        # claim a killed worker left unrecorded is submitted again after 2 s.
        "JOBWARDEN_SCHEDULE_INTERVAL_SECONDS": "0.5",
        "JOBWARDEN_SCHEDULE_RESUBMIT_AFTER_SECONDS": "2",
        # More than 4 slots due in one tick are spread over the workers (schedule_submit).
        "JOBWARDEN_SCHEDULE_SUBMIT_CHUNK": "4",
        "JW_ACCEPTANCE_NOTIFY_SECRET": NOTIFY_SECRET,
    }
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks import runtime

    get_settings.cache_clear()
    runtime.reset()
    yield env
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    get_settings.cache_clear()
    runtime.reset()


@pytest.fixture(scope="package")
def stack(worker_env: dict[str, str]) -> Iterator[Stack]:
    """Two workers and one beat for the acceptance tests; stopped before other packages run,
    so no worker ever touches the rows the integration tests write by hand."""
    s = Stack(worker_env)
    s.start_worker("w1")
    s.start_worker("w2")
    s.start_beat()
    # Tests measure deadlines from submission: start them only once workers consume.
    s.wait_ready("w1")
    s.wait_ready("w2")
    yield s
    s.stop()


def result_bytes(row: Any) -> bytes:
    """A result row's bytes: inline, or read back from the run's result store."""
    if row.content is not None:
        return bytes(row.content)
    from jobwarden.tasks.runtime import current

    return b"".join(current().result_store.read(row.location))


def max_in_one_second(times: list[float]) -> int:
    """The most of ``times`` (seconds) inside any one-second window."""
    times = sorted(times)
    return max((sum(1 for t in times if s <= t < s + 1.0) for s in times), default=0)


def limiter_grants(database_url: str, op_ids: list[Any], *, since: Any) -> list[float]:
    """The rate limiter's grant times (Unix seconds) of the requests sent for ``op_ids``
    since ``since``: each request's event records when the limiter let it go. A loaded
    machine shifts arrivals at the provider by milliseconds or more; the grants are what
    the limiter promised, exactly."""
    from datetime import datetime

    from sqlalchemy import select

    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.persistence.tables import EventRow

    with transaction(database_url) as session:
        excerpts = session.scalars(
            select(EventRow.excerpt).where(EventRow.operation_id.in_(op_ids), EventRow.at >= since)
        ).all()
    return sorted(
        datetime.fromisoformat(e["rate_limit_granted_at"]).timestamp()
        for e in excerpts
        if e and "rate_limit_granted_at" in e
    )


class Pipeline:
    """What a test needs to drive operations and read their outcome."""

    def __init__(self, sandbox: SandboxServer, database_url: str) -> None:
        self.sandbox = sandbox
        self.database_url = database_url
        self.created: list[str] = []

    def submit(
        self,
        behaviour: dict[str, Any] | None = None,
        *,
        provider: str = "sandbox",
        key: str | None = None,
        command: dict[str, Any] | None = None,
        tenant: str = "acceptance",
        **limits: Any,
    ) -> str:
        from jobwarden.tasks.intake import submit_operation

        result = submit_operation(
            tenant=tenant,
            provider=provider,
            idempotency_key=key or secrets.token_hex(8),
            command=command or {"kind": "export", "behaviour": behaviour or {}},
            requested_by="pytest",
            **limits,
        )
        assert result.operation_id is not None, result
        self.created.append(result.operation_id)
        return result.operation_id

    def row(self, op_id: str) -> Any:
        from jobwarden.models.persistence import store
        from jobwarden.models.persistence.db import transaction

        with transaction(self.database_url) as session:
            return store.load(session, uuid.UUID(op_id))

    def events(self, op_id: str) -> list[Any]:
        from jobwarden.models.persistence import store
        from jobwarden.models.persistence.db import transaction

        with transaction(self.database_url) as session:
            return store.events_for(session, uuid.UUID(op_id))

    def kinds(self, op_id: str) -> list[str]:
        return [e.draft.kind.value for e in self.events(op_id)]

    def recorded_status_requests(self, op_id: str) -> list[int]:
        """The status requests the history records as sent, by ordinal: claimed by a
        poll_sent, or (reserved by the decision before) carried by their answer's event."""
        return [
            e.draft.excerpt["request"]
            for e in self.events(op_id)
            if e.draft.kind.value in ("poll_sent", "polled", "observed")
            and "request" in (e.draft.excerpt or {})
        ]

    def wait_state(
        self, op_id: str, states: set[str] | str | None = None, *, timeout: float = 30.0
    ) -> Any:
        wanted = {states} if isinstance(states, str) else (states or STOPPED)

        def reached() -> Any:
            row = self.row(op_id)
            return row if row is not None and row.state in wanted else None

        try:
            return wait_for(reached, timeout=timeout, what=f"{op_id} in {sorted(wanted)}")
        except TimeoutError:
            row = self.row(op_id)
            raise AssertionError(
                f"operation {op_id} is {row.state if row else None}, wanted {sorted(wanted)}; "
                f"events: {self.kinds(op_id)}"
            ) from None

    def job_requests(self, op_id: str, kind: str | None = None) -> list[dict[str, Any]]:
        row = self.row(op_id)
        log = self.sandbox.requests(job_id=row.remote_job_id) if row.remote_job_id else []
        return [r for r in log if kind is None or r["kind"] == kind]

    def creates(self, op_id: str) -> list[dict[str, Any]]:
        return self.sandbox.requests(key=self.row(op_id).provider_token)

    def remote_jobs(self, op_id: str) -> list[dict[str, Any]]:
        return self.sandbox.jobs_for_key(self.row(op_id).provider_token)

    def sent_creates(self, op_id: str) -> list[dict[str, Any]]:
        """Every create the provider saw carrying this operation's trace id, whatever its
        token: unlike creates(), a create sent under a fresh token would show up here."""
        trace = self.row(op_id).trace_id
        return [
            r
            for r in self.sandbox.requests()
            if r["kind"] == "create" and trace in (r["traceparent"] or "")
        ]

    def stored_results(self, op_id: str) -> list[Any]:
        """The result rows stored for the operation (bytes and integrity data)."""
        from sqlalchemy import select

        from jobwarden.models.persistence.db import transaction
        from jobwarden.models.persistence.tables import ResultRow

        with transaction(self.database_url) as session:
            found = session.scalars(
                select(ResultRow).where(ResultRow.operation_id == uuid.UUID(op_id))
            ).all()
            return [(result_bytes(r), r.sha256, r.record_count) for r in found]

    def verify_all(self) -> None:
        from jobwarden.models.persistence import store
        from jobwarden.models.persistence.db import transaction

        with transaction(self.database_url) as session:
            for op_id in self.created:
                assert store.verify(session, uuid.UUID(op_id)) == [], op_id


@pytest.fixture
def pipeline(
    sandbox: SandboxServer, database_url: str, worker_env: dict[str, str]
) -> Iterator[Pipeline]:
    p = Pipeline(sandbox, database_url)
    yield p
    # Every operation a scenario touched must keep a verifiable history.
    p.verify_all()


@pytest.fixture
def redis_client(worker_env: dict[str, str]) -> Iterator[Any]:
    from redis import Redis

    client = Redis.from_url(os.environ["JOBWARDEN_TEST_REDIS_URL"])
    yield client
    client.close()


@pytest.fixture
def arm(redis_client: Any) -> Callable[[str, str, str], None]:
    """arm(point, idempotency_key, action): one fault for one operation."""
    from jobwarden.tasks import faults

    prefix = os.environ["JOBWARDEN_KEY_PREFIX"]

    def _arm(point: str, key: str, action: str) -> None:
        faults.arm(redis_client, prefix, point, key, action)

    return _arm


@pytest.fixture
def fired(redis_client: Any) -> Callable[[str, str], int | None]:
    """fired(point, idempotency_key): pid of the process that hit the fault, once it has."""
    from jobwarden.tasks import faults

    prefix = os.environ["JOBWARDEN_KEY_PREFIX"]

    def _fired(point: str, key: str) -> int | None:
        value = redis_client.get(faults.fired_key(prefix, point, key))
        return int(value) if value is not None else None

    return _fired


def worker_logs(stack: Stack) -> str:
    """Everything the stack's workers and beats logged, whole: Stack.logs() keeps only
    each file's tail, where a line a test waits for may already have scrolled out."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(stack.log_dir.glob("*.log")))


def log_records(stack: Stack) -> list[dict[str, Any]]:
    """Every line the stack logged as a JSON object (observability.logs: JSON when not a TTY).

    What Celery prints before its logging is set up (a warning to root) or past it (the
    shutdown notice) is no record: ``unstructured_lines`` returns those.
    """
    records = []
    for line in worker_logs(stack).splitlines():
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                records.append(json.loads(line))
    return records


def unstructured_lines(stack: Stack) -> list[str]:
    """The lines of the stack's logs that are not one JSON object each."""
    out = []
    for line in worker_logs(stack).splitlines():
        try:
            parsed = json.loads(line) if line.strip() else {}
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            out.append(line)
    return out


def logged(stack: Stack, event: str, **fields: Any) -> list[dict[str, Any]]:
    """The stack's log records of ``event`` whose fields have these values."""
    return [
        r
        for r in log_records(stack)
        if r.get("event") == event and all(r.get(k) == v for k, v in fields.items())
    ]
