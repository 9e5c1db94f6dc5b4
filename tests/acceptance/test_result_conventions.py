"""Result conventions end to end (issue 8, findings 3 and 4): real workers and beat against
the sandbox, each test named after the convention it models.

Integrity: RFC 9530 ``Repr-Digest`` / ``Content-Digest``, RFC 1864 ``Content-MD5`` and
Google Cloud Storage ``x-goog-hash``, each on a result whose bytes were changed after the
digests were taken, checked whether or not the contract lists the field. Per-item
outcomes: an Azure-style list with a status per item, Google-style JSON Lines whose failed
lines carry ``error``, and the OpenAI Batch output file with the batch object's
``request_counts`` and ``error_file_id``.
"""

from __future__ import annotations

from typing import Any

import pytest

from jobwarden.demo.harness import Stack
from tests.acceptance.conftest import Pipeline
from tests.cli_runner import run_cli

pytestmark = pytest.mark.usefixtures("stack")

TWO_OF_500 = {"polls_to_finish": 1, "result_items": 500, "result_failed_items": 2}


@pytest.mark.parametrize(
    ("digest", "source", "algorithms"),
    [
        ("repr-digest", "Repr-Digest", ["sha-256", "sha-512"]),
        ("content-digest", "Content-Digest", ["sha-256", "sha-512"]),
        ("content-md5", "Content-MD5", ["md5"]),
        ("x-goog-hash", "x-goog-hash", ["crc32c", "md5"]),
    ],
)
def test_an_altered_body_with_correct_looking_digest_headers_ends_result_validation_failed(
    pipeline: Pipeline, digest: str, source: str, algorithms: list[str]
) -> None:
    behaviour = {"polls_to_finish": 1, "result_digest": digest}
    altered = pipeline.submit({**behaviour, "result_altered": True}, provider="sandbox_digests")
    intact = pipeline.submit(behaviour, provider="sandbox_digests")

    row = pipeline.wait_state(altered)
    assert row.state == "result_validation_failed"
    summary = row.validation_summary
    assert summary["problem"] == "checksum mismatch"
    checks = summary["digests"]
    assert [(c["source"], c["algorithm"]) for c in checks] == [(source, a) for a in algorithms]
    assert all(not c["matches"] and c["ours"] != c["theirs"] for c in checks)
    assert pipeline.stored_results(altered) == []  # the altered bytes are never stored
    assert "succeeded" not in [e.draft.to_state for e in pipeline.events(altered)]
    # Asked without content-coding, so the digests compare with the bytes as received.
    (download,) = pipeline.job_requests(altered, "result")
    assert download["accept_encoding"] == "identity"

    row = pipeline.wait_state(intact)
    assert row.state == "succeeded", row.validation_summary
    verified = row.validation_summary["digests"]
    assert [(c["source"], c["matches"]) for c in verified] == [(source, True)] * len(algorithms)


@pytest.mark.parametrize(
    ("provider", "shape", "digest", "source", "algorithms"),
    [
        # The shipped openai_batch contract lists no digests; nor does this variant.
        (
            "sandbox_openai_items",
            "openai_jsonl",
            "repr-digest",
            "Repr-Digest",
            ["sha-256", "sha-512"],
        ),
        # Nor does google_aip151: a Cloud Storage download still carries x-goog-hash.
        ("sandbox_google_items", "google_jsonl", "x-goog-hash", "x-goog-hash", ["crc32c", "md5"]),
    ],
)
def test_a_digest_header_the_contract_does_not_list_is_still_checked_and_a_wrong_one_fails(
    pipeline: Pipeline, provider: str, shape: str, digest: str, source: str, algorithms: list[str]
) -> None:
    behaviour = {"polls_to_finish": 1, "result_shape": shape, "result_digest": digest}
    # result_altered: one byte changed after the digests were taken, so the header is wrong
    # for the bytes received; without the header check the result would pass every rule.
    altered = pipeline.submit({**behaviour, "result_altered": True}, provider=provider)
    intact = pipeline.submit(behaviour, provider=provider)

    row = pipeline.wait_state(altered)
    assert row.state == "result_validation_failed", row.validation_summary
    assert row.validation_summary["problem"] == "checksum mismatch"
    checks = row.validation_summary["digests"]
    assert [(c["source"], c["algorithm"], c["matches"]) for c in checks] == [
        (source, a, False) for a in algorithms
    ]
    assert pipeline.stored_results(altered) == []
    # Every result fetch asks for the bytes as sent, digests listed or not.
    (download,) = pipeline.job_requests(altered, "result")
    assert download["accept_encoding"] == "identity"

    row = pipeline.wait_state(intact)
    assert row.state == "succeeded", row.validation_summary
    verified = row.validation_summary["digests"]
    assert [(c["source"], c["algorithm"], c["matches"]) for c in verified] == [
        (source, a, True) for a in algorithms
    ]


def _summary(pipeline: Pipeline, op: str) -> dict[str, Any]:
    row = pipeline.wait_state(op)
    assert row.state == "succeeded", row.validation_summary
    summary: dict[str, Any] = row.validation_summary
    assert summary["valid"] is True
    return summary


def test_azure_style_item_status_records_498_succeeded_and_2_failed_with_references(
    pipeline: Pipeline, stack: Stack, worker_env: dict[str, str]
) -> None:
    op = pipeline.submit(
        {**TWO_OF_500, "result_shape": "azure_status"}, provider="sandbox_azure_items"
    )
    summary = _summary(pipeline, op)
    assert (summary["succeeded_items"], summary["failed_item_count"]) == (498, 2)
    assert summary["failed_item_refs"] == ["item-499", "item-500"]
    # The operator's view: `jobwarden history` says how the items ended.
    told = run_cli("history", op, env={**stack.env, **worker_env})
    assert told.returncode == 0, told.stderr
    out = told.stdout
    (line,) = [ln for ln in out.splitlines() if "result collected" in ln]
    assert line.endswith(
        "result collected, 498 items ok, 2 failed (item-499, item-500) -> succeeded"
    )


def test_google_style_json_lines_with_error_records_498_succeeded_and_2_failed_with_keys(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit(
        {**TWO_OF_500, "result_shape": "google_jsonl"}, provider="sandbox_google_items"
    )
    summary = _summary(pipeline, op)
    assert (summary["succeeded_items"], summary["failed_item_count"]) == (498, 2)
    assert summary["failed_item_refs"] == ["item-499", "item-500"]


def test_openai_batch_request_counts_and_error_file_record_498_succeeded_and_2_failed(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit(
        {**TWO_OF_500, "result_shape": "openai_jsonl"}, provider="sandbox_openai_items"
    )
    summary = _summary(pipeline, op)
    assert (summary["succeeded_items"], summary["failed_item_count"]) == (498, 2)
    assert summary["declared_counts"] == {"completed": 498, "failed": 2, "total": 500}
    # The failed requests are in error_file_id: recorded, counted, not downloaded.
    job = pipeline.row(op).remote_job_id
    assert summary["failed_items_file"] == f"file-err-{job}"
    assert summary["failed_item_refs"] == []
    assert len(pipeline.job_requests(op, "result")) == 1
