"""The business decisions only a person takes (issue 20, item 3), with real workers and
the sandbox provider over HTTP: a resubmitted job is created again under a *new* token
(never a re-send under the old one), and a result that failed validation is accepted as
the provider sent it, ending ``result_accepted``, never ``succeeded``.
"""

from __future__ import annotations

import hashlib
import uuid

import pytest

from jobwarden.demo.harness import Stack
from jobwarden.models.errors import RefusedInputError
from tests.acceptance.conftest import Pipeline


def test_a_failed_job_resubmitted_by_a_person_is_created_again_under_a_new_token(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation, escalation_options

    old = pipeline.submit({"polls_to_finish": 1, "outcome": "failed"})
    ended = pipeline.wait_state(old)
    assert ended.state == "failed"
    assert [o.kind.value for o in escalation_options(old)] == ["resubmit"]

    decided = decide_escalation(old, "resubmit", "alice", "the input was fixed upstream")
    assert decided.state == "failed" and decided.resubmitted_as is not None
    new = decided.resubmitted_as
    pipeline.created.append(new)
    again = pipeline.wait_state(new)
    assert again.state == "failed"  # the same command fails the same way: a new attempt
    before = pipeline.row(old)
    # One create under each token; the old token was never sent again.
    assert len(pipeline.creates(old)) == 1 and len(pipeline.creates(new)) == 1
    assert again.provider_token != before.provider_token
    assert again.remote_job_id != before.remote_job_id
    assert (again.resubmit_of, before.resubmitted_as) == (uuid.UUID(old), uuid.UUID(new))
    assert pipeline.kinds(old)[-1] == "resubmitted"
    assert pipeline.events(new)[0].draft.excerpt["resubmit_of"] == old
    # Its own offer: the replacement failed too, and may be resubmitted in its turn.
    assert [o.kind.value for o in escalation_options(new)] == ["resubmit"]
    assert escalation_options(old) == []
    pipeline.verify_all()


def test_a_result_that_failed_validation_is_accepted_as_sent_and_never_reads_as_success(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import decide_escalation, escalation_options

    # 6 of 10 items failed: over the sandbox contract's max_failed_fraction of 0.5.
    op = pipeline.submit({"polls_to_finish": 1, "result_items": 10, "result_failed_items": 6})
    row = pipeline.wait_state(op)
    assert row.state == "result_validation_failed"
    summary = row.validation_summary
    assert summary["valid"] is False and summary["kept"] is True
    ((content, sha256, _),) = pipeline.stored_results(op)
    assert hashlib.sha256(content).hexdigest() == sha256 == summary["sha256"]
    assert [o.kind.value for o in escalation_options(op)] == ["accept_result", "resubmit"]

    with pytest.raises(RefusedInputError, match="note"):
        decide_escalation(op, "accept_result", "bob", "")
    assert decide_escalation(op, "accept_result", "bob", "6 rows are a known bad batch").state == (
        "result_accepted"
    )
    done = pipeline.row(op)
    assert done.state == "result_accepted" and done.validation_summary["valid"] is False
    accepted = pipeline.events(op)[-1].draft
    assert (accepted.kind.value, accepted.actor) == ("result_accepted", "human:bob")
    assert accepted.excerpt["sha256"] == sha256
    assert "succeeded" not in {e.draft.to_state for e in pipeline.events(op)}
    assert len(pipeline.job_requests(op, "result")) == 1  # accepting fetches nothing again
    pipeline.verify_all()


def test_a_result_contradicting_its_checksum_is_not_kept_and_cannot_be_accepted(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.humans.interventions import escalation_options

    op = pipeline.submit({"polls_to_finish": 1, "result_bad_checksum": True})
    row = pipeline.wait_state(op)
    assert row.state == "result_validation_failed" and "kept" not in row.validation_summary
    assert pipeline.stored_results(op) == []
    assert [o.kind.value for o in escalation_options(op)] == ["resubmit"]
