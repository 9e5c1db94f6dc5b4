"""The history's story (``jobwarden history OP``), read from the events a step records."""

from __future__ import annotations

import pytest

from jobwarden.models.create_decisions import after_create
from jobwarden.models.history.chain import ChainedEvent
from jobwarden.models.provider.signals import RawResponse
from jobwarden.observability.story import event_line
from tests.unit.factories import NOW, planned, reply
from tests.unit.step_helpers import SANDBOX, sent_create


def recorded(answer: RawResponse) -> list[ChainedEvent]:
    """The events a create answered with ``answer`` records, as the history reads them."""
    op, send = sent_create()
    p = planned(op, after_create(op, SANDBOX, send.request, answer, NOW, 1.0), answer=answer)
    return [
        ChainedEvent(operation_id="op", seq=op.event_count + i, draft=e, prev_hash="", hash="")
        for i, e in enumerate(p.events, start=1)
    ]


@pytest.mark.parametrize(
    ("answer", "line"),
    [
        (
            reply(429, headers={"retry-after": "3"}),
            "12:00:00 create rate limited: rate_limited, 429, Retry-After 3, "
            "next attempt 12:00:03 (provider_retry_after)",
        ),
        (reply(400, {"error": "bad request"}), "12:00:00 create refused: http_400, 400 -> failed"),
    ],
)
def test_the_story_tells_a_create_to_try_again_later_from_one_refused_for_good(
    answer: RawResponse, line: str
) -> None:
    assert [event_line(ev) for ev in recorded(answer)] == [line]


def test_a_create_answer_a_convention_stops_at_is_told_as_the_creates_answer() -> None:
    # Issue 34: an ARM create answered 202 naming nothing to poll was told as "polled, 202"
    # though no status request was made.
    from jobwarden.models.provider.requests import create_request
    from jobwarden.models.states import OperationState as S
    from tests.unit.factories import context, operation

    arm = context("azure_arm")
    command = {
        "subscription": "s",
        "resource_group": "g",
        "namespace": "Microsoft.Foo",
        "type": "widgets",
        "name": "w1",
        "api_version": "2024-01-01",
        "action": "resource-action",
        "operation": "export",
    }
    op = operation(S.create_pending, command=command, provider="azure_arm", create_attempts=1)
    answer = reply(202)
    p = planned(op, after_create(op, arm, create_request(arm, op), answer, NOW, 1.0), answer=answer)
    lines = [
        event_line(ChainedEvent(operation_id="op", seq=i, draft=e, prev_hash="", hash=""))
        for i, e in enumerate(p.events, start=1)
    ]
    assert lines and not any("polled" in line for line in lines), lines
    assert lines[0].startswith("12:00:00 create response: 202"), lines
