"""Concurrency keys through real workers: one deploy at a time per target (issue 13, item 1).

The sandbox's request log is the witness: an operation holds its key from its
create request until the end of the last request it sent (the result download),
and no two operations of one key may overlap in it.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from typing import Any

import pytest

from jobwarden.demo.harness import Stack, wait_for
from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")


def _span(pipeline: Pipeline, op: str) -> tuple[float, float]:
    """(first create sent, last request of the job ended) on the sandbox's clock."""
    creates = pipeline.creates(op)
    assert creates, f"{op} sent no create"
    requests = creates + pipeline.job_requests(op)
    start = min(r["monotonic"] for r in creates)
    end = max(r["ended"] or r["monotonic"] for r in requests)
    return start, end


def _excerpts(pipeline: Pipeline, op: str, kind: str) -> list[dict[str, Any]]:
    return [e.draft.excerpt or {} for e in pipeline.events(op) if e.draft.kind.value == kind]


def _first_state(pipeline: Pipeline, op: str) -> str:
    return str(pipeline.events(op)[0].draft.to_state)


def test_ten_operations_with_one_concurrency_key_run_one_at_a_time_in_submission_order(
    pipeline: Pipeline,
) -> None:
    key = f"deploy:payments:{secrets.token_hex(4)}"
    ops = [pipeline.submit({"polls_to_finish": 2}, concurrency_key=key) for _ in range(10)]
    # The first takes the free key; the other nine wait durably, holding no worker.
    assert [_first_state(pipeline, op) for op in ops] == ["create_pending"] + ["queued"] * 9
    for op in ops:
        assert pipeline.wait_state(op, timeout=60).state == "succeeded"
    spans = [_span(pipeline, op) for op in ops]
    for i, ((_, end), (start, _)) in enumerate(itertools.pairwise(spans)):
        assert end < start, f"operation {i + 1} started before operation {i} ended its requests"
    # The hand-over is an event on both sides, each naming the other.
    for before, after in itertools.pairwise(ops):
        assert [x["to"] for x in _excerpts(pipeline, before, "key_handed_over")] == [[after]]
        assert [x["after"] for x in _excerpts(pipeline, after, "admitted")] == [before]


def test_a_holder_killed_mid_way_keeps_the_key_until_another_worker_finishes_it(
    pipeline: Pipeline,
    arm: Callable[[str, str, str], None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = f"deploy:kill:{secrets.token_hex(4)}"
    holder_key = secrets.token_hex(8)
    arm("after_poll_response", holder_key, "kill")
    holder = pipeline.submit({"polls_to_finish": 2}, key=holder_key, concurrency_key=key)
    waiting = pipeline.submit({"polls_to_finish": 1}, concurrency_key=key)
    wait_for(lambda: fired("after_poll_response", holder_key), timeout=20, what="the holder's kill")
    # The dead worker's operation is still a holder: nobody else took the key.
    assert pipeline.row(holder).state not in ("succeeded", "failed")
    assert pipeline.row(waiting).state == "queued"
    assert pipeline.wait_state(holder, timeout=40).state == "succeeded"
    assert pipeline.wait_state(waiting, timeout=40).state == "succeeded"
    (_, held_until), (started, _) = _span(pipeline, holder), _span(pipeline, waiting)
    assert held_until < started
    assert [x["after"] for x in _excerpts(pipeline, waiting, "admitted")] == [holder]


def test_a_worker_killed_before_the_hand_over_leaves_the_queue_to_the_sweeper(
    pipeline: Pipeline,
    arm: Callable[[str, str, str], None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = f"deploy:sweep:{secrets.token_hex(4)}"
    holder_key = secrets.token_hex(8)
    # The holder's end is committed; the process dies before handing the key over.
    arm("before_hand_over", holder_key, "kill")
    holder = pipeline.submit({"polls_to_finish": 1}, key=holder_key, concurrency_key=key)
    waiting = pipeline.submit({"polls_to_finish": 1}, concurrency_key=key)
    assert pipeline.wait_state(holder, timeout=30).state == "succeeded"
    wait_for(lambda: fired("before_hand_over", holder_key), timeout=20, what="the kill")
    assert pipeline.wait_state(waiting, timeout=30).state == "succeeded"
    # The sweeper's pass names the holder that ended last, and records the hand-over on it.
    assert [x["after"] for x in _excerpts(pipeline, waiting, "admitted")] == [holder]
    assert [x["to"] for x in _excerpts(pipeline, holder, "key_handed_over")] == [[waiting]]


def test_an_escalated_holder_keeps_the_key_until_a_human_decides(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.concurrency import hand_over
    from jobwarden.tasks.humans.interventions import decide_escalation
    from jobwarden.tasks.runtime import current

    key = f"deploy:escalated:{secrets.token_hex(4)}"
    holder = pipeline.submit({"polls_to_finish": 5}, max_status_requests=1, concurrency_key=key)
    waiting = pipeline.submit({"polls_to_finish": 1}, concurrency_key=key)
    row = pipeline.wait_state(holder, timeout=30)
    assert (row.state, row.escalation_reason) == ("escalated", "request_budget_exhausted")
    # The hand-over the sweeper's pass would try, run here: the assertion waits on it,
    # not on time.
    assert hand_over(current(), "acceptance", key) == []
    assert pipeline.row(waiting).state == "queued"
    assert pipeline.creates(waiting) == []
    assert decide_escalation(holder, "abandon", "alice", "the window closed").state == "abandoned"
    assert pipeline.wait_state(waiting, timeout=30).state == "succeeded"
    assert [x["after"] for x in _excerpts(pipeline, waiting, "admitted")] == [holder]
    (_, held_until), (started, _) = _span(pipeline, holder), _span(pipeline, waiting)
    assert held_until < started


def test_a_queued_operation_cancelled_by_a_person_ends_without_sending_anything(
    pipeline: Pipeline,
) -> None:
    from jobwarden.tasks.humans.interventions import request_cancel

    key = f"deploy:cancel:{secrets.token_hex(4)}"
    holder = pipeline.submit({"polls_to_finish": 2}, concurrency_key=key)
    cancelled = pipeline.submit({"polls_to_finish": 1}, concurrency_key=key)
    last = pipeline.submit({"polls_to_finish": 1}, concurrency_key=key)
    assert request_cancel(cancelled, "alice", "superseded") == "abandoned"
    assert pipeline.wait_state(holder, timeout=30).state == "succeeded"
    assert pipeline.wait_state(last, timeout=30).state == "succeeded"
    assert pipeline.creates(cancelled) == []
    assert [x["after"] for x in _excerpts(pipeline, last, "admitted")] == [holder]
