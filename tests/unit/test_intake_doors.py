"""A Celery message cannot say which door it came through or who the caller was."""

from __future__ import annotations

import pytest

from jobwarden.tasks.intake import MESSAGE_FIELDS, submit_from_message

REQUEST = {
    "tenant": "t",
    "provider": "sandbox",
    "idempotency_key": "k",
    "command": {"kind": "export"},
    "requested_by": "svc",
}


@pytest.mark.parametrize("field", ["door", "caller"])
def test_a_message_naming_its_door_or_caller_is_invalid_and_records_nothing(field: str) -> None:
    answer = submit_from_message({**REQUEST, field: "http"})
    assert answer["outcome"] == "invalid"
    assert "set by the intake itself" in answer["error"]


def test_a_message_may_carry_a_traceparent() -> None:
    assert "trace_parent" in MESSAGE_FIELDS
    assert {"door", "caller", "runtime"}.isdisjoint(MESSAGE_FIELDS)
