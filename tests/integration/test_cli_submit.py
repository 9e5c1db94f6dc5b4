"""`jobwarden submit` takes the per-submission bounds as flags (and their env twins)."""

from __future__ import annotations

import json
import secrets
import uuid

from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from tests.integration.test_cli import _cli


def test_submit_flags_narrow_the_bounds_of_that_operation(database_url: str) -> None:
    key = secrets.token_hex(8)
    done = _cli(
        "submit",
        "sandbox",
        '{"kind": "export"}',
        "--key",
        key,
        "--max-status-requests",
        "7",
        "--max-transport-failures",
        "2",
        "--result-deadline-seconds",
        "600",
        "--cancel-deadline-seconds",
        "30",
        "--source-event-id",
        "evt-cli-1",
    )
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["outcome"] == "created"
    with transaction(database_url) as session:
        op = store.load(session, uuid.UUID(answer["operation_id"]))
    assert op is not None
    assert (op.max_status_requests, op.max_transport_failures) == (7, 2)
    assert (op.result_deadline - op.created_at).total_seconds() == 600
    assert (op.cancel_window_seconds, op.source_event_id) == (30, "evt-cli-1")


def test_an_absurd_bound_from_the_environment_is_one_line_and_exit_2(database_url: str) -> None:
    done = _cli(
        "submit",
        "sandbox",
        '{"kind": "export"}',
        "--key",
        secrets.token_hex(8),
        env={"JOBWARDEN_MAX_STATUS_REQUESTS": "0"},
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "max_status_requests" in done.stderr


def test_submit_takes_a_business_deadline_as_seconds_or_a_time(database_url: str) -> None:
    answers = []
    for deadline in ("90", "2031-01-02T09:00:00Z"):
        done = _cli(
            "submit",
            "sandbox",
            '{"kind": "export"}',
            "--key",
            secrets.token_hex(8),
            "--business-deadline",
            deadline,
        )
        assert done.returncode == 0, done.stderr
        answers.append(json.loads(done.stdout)["operation_id"])
    with transaction(database_url) as session:
        relative, absolute = (store.load(session, uuid.UUID(a)) for a in answers)
    assert relative is not None and relative.business_deadline is not None
    assert (relative.business_deadline - relative.created_at).total_seconds() == 90
    assert absolute is not None and absolute.business_deadline is not None
    assert absolute.business_deadline.isoformat() == "2031-01-02T09:00:00+00:00"


def test_a_malformed_business_deadline_from_the_environment_is_one_line_and_exit_2(
    database_url: str,
) -> None:
    done = _cli(
        "submit",
        "sandbox",
        '{"kind": "export"}',
        "--key",
        secrets.token_hex(8),
        env={"JOBWARDEN_BUSINESS_DEADLINE": "tomorrow"},
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "business_deadline" in done.stderr
