"""Every digest field a result answer carries is checked, whether or not the contract lists it.

The shipped ``azure_lro`` and ``openai_batch`` contracts list no ``digests``; a download whose
bytes contradict its own RFC 9530 ``Repr-Digest`` / ``Content-Digest``, RFC 1864
``Content-MD5`` or Google Cloud Storage ``x-goog-hash`` is still ``result_validation_failed``
("checksum mismatch"). A field that does not parse is ignored as a whole and noted (RFC 8941
section 4.2); an algorithm not known here is ignored (RFC 9530 section 2). The contract's
``digests`` says which fields must be there; ``fetch = "inline"`` has no answer to check.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

import google_crc32c
import pytest

from jobwarden.models.actions import Finish, Send, Succeed
from jobwarden.models.contracts.contract import DigestField, ResultSpec
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.results.validation import validate_result
from jobwarden.models.states import OperationState
from tests.unit.factories import NOW, claimed, context, operation, planned, reply, walked

# One OpenAI Batch output line (the file GET /v1/files/{output_file_id}/content returns).
OPENAI_LINE = (
    b'{"id": "batch_req_1", "custom_id": "request-1", "response": {"status_code": 200, '
    b'"request_id": "req_1", "body": {"id": "chatcmpl-1"}}, "error": null}\n'
)
HELLO = b'{"hello": "world"}'  # RFC 9530's example representation


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def sha256(content: bytes) -> str:
    return _b64(hashlib.sha256(content).digest())


def sha512(content: bytes) -> str:
    return _b64(hashlib.sha512(content).digest())


def md5(content: bytes) -> str:
    return _b64(hashlib.md5(content, usedforsecurity=False).digest())


def crc32c(content: bytes) -> str:
    return _b64(google_crc32c.Checksum(content).digest())  # type: ignore[no-untyped-call]


WRONG = b"not the bytes received"
Headers = Callable[[bytes], dict[str, str]]


def _result_spec(name: str) -> ResultSpec:
    spec = context(name).contract.result
    assert spec is not None and spec.digests == (), f"{name} now lists digests"
    return spec


# (contract, its result spec, bytes it accepts): the shipped ones that list no digests, and
# a bare spec (no content type, no item rules) standing for any contract that downloads.
CONTRACTS = [
    pytest.param(_result_spec("openai_batch"), OPENAI_LINE, id="openai_batch"),
    pytest.param(_result_spec("azure_lro"), HELLO, id="azure_lro"),
    pytest.param(ResultSpec(fetch="url", content_type=None), HELLO, id="bare"),
]

# (headers made from the bytes received, problem, checks as (source, algorithm, matches),
#  a note that must be recorded).
CASES: list[Any] = [
    pytest.param(
        lambda c: {"repr-digest": f"sha-256=:{sha256(WRONG)}:"},
        "checksum mismatch",
        [("Repr-Digest", "sha-256", False)],
        None,
        id="rfc9530-wrong-repr-digest-fails",
    ),
    pytest.param(
        lambda c: {"repr-digest": f"sha-256=:{sha256(c)}:, sha-512=:{sha512(c)}:"},
        None,
        [("Repr-Digest", "sha-256", True), ("Repr-Digest", "sha-512", True)],
        None,
        id="rfc9530-right-repr-digest-passes-and-is-recorded",
    ),
    pytest.param(
        lambda c: {"repr-digest": f"sha-256=:{sha256(c)}:, sha-512=:{sha512(WRONG)}:"},
        "checksum mismatch",
        [("Repr-Digest", "sha-256", True), ("Repr-Digest", "sha-512", False)],
        None,
        id="rfc9530-one-wrong-algorithm-of-two-fails",
    ),
    pytest.param(
        lambda c: {"content-digest": f"sha-512=:{sha512(WRONG)}:"},
        "checksum mismatch",
        [("Content-Digest", "sha-512", False)],
        None,
        id="rfc9530-wrong-content-digest-fails",
    ),
    pytest.param(
        lambda c: {"content-digest": f"sha-256=:{sha256(c)}:"},
        None,
        [("Content-Digest", "sha-256", True)],
        None,
        id="rfc9530-right-content-digest-passes",
    ),
    pytest.param(
        lambda c: {"content-md5": md5(WRONG)},
        "checksum mismatch",
        [("Content-MD5", "md5", False)],
        None,
        id="rfc1864-wrong-content-md5-fails",
    ),
    pytest.param(
        lambda c: {"content-md5": md5(c)},
        None,
        [("Content-MD5", "md5", True)],
        None,
        id="rfc1864-right-content-md5-passes",
    ),
    pytest.param(
        lambda c: {"x-goog-hash": f"crc32c={crc32c(WRONG)}, md5={md5(c)}"},
        "checksum mismatch",
        [("x-goog-hash", "crc32c", False), ("x-goog-hash", "md5", True)],
        None,
        id="gcs-x-goog-hash-crc32c-mismatch-fails",
    ),
    pytest.param(
        lambda c: {"x-goog-hash": f"crc32c={crc32c(c)}, md5={md5(WRONG)}"},
        "checksum mismatch",
        [("x-goog-hash", "crc32c", True), ("x-goog-hash", "md5", False)],
        None,
        id="gcs-x-goog-hash-md5-mismatch-fails",
    ),
    pytest.param(
        lambda c: {"x-goog-hash": f"crc32c={crc32c(c)}, md5={md5(c)}"},
        None,
        [("x-goog-hash", "crc32c", True), ("x-goog-hash", "md5", True)],
        None,
        id="gcs-x-goog-hash-right-passes",
    ),
    pytest.param(
        lambda c: {"repr-digest": f"sha-256=:{sha256(c)}:", "content-md5": md5(WRONG)},
        "checksum mismatch",
        [("Repr-Digest", "sha-256", True), ("Content-MD5", "md5", False)],
        None,
        id="a-right-field-does-not-excuse-a-wrong-one",
    ),
    pytest.param(
        lambda c: {"repr-digest": f"sha-256={sha256(WRONG)}"},  # a token, not :sf-binary:
        None,
        [],
        "Repr-Digest ignored: malformed",
        id="rfc8941-unparsable-repr-digest-is-ignored-and-noted",
    ),
    pytest.param(
        lambda c: {"content-md5": "not base64!"},
        None,
        [],
        "Content-MD5 ignored: malformed (not base64)",
        id="rfc1864-unparsable-content-md5-is-ignored-and-noted",
    ),
    pytest.param(
        lambda c: {"x-goog-hash": "crc32c=AAAA"},
        None,
        [],
        "x-goog-hash ignored: malformed (crc32c is 3 octets, not 4)",
        id="gcs-x-goog-hash-of-the-wrong-size-is-ignored-and-noted",
    ),
    pytest.param(
        lambda c: {"repr-digest": "unixsum=30637, sha=:AAAA:"},
        None,
        [],
        "Repr-Digest members not known here: unixsum, sha",
        id="rfc9530-unknown-algorithms-are-ignored-and-noted",
    ),
    pytest.param(lambda c: {}, None, [], None, id="no-digest-field-nothing-to-check"),
]


@pytest.mark.parametrize(("spec", "content"), CONTRACTS)
@pytest.mark.parametrize(("headers", "problem", "checks", "note"), CASES)
def test_a_digest_field_present_is_checked_though_the_contract_lists_none(
    spec: ResultSpec,
    content: bytes,
    headers: Headers,
    problem: str | None,
    checks: list[tuple[str, str, bool]],
    note: str | None,
) -> None:
    verdict = validate_result(
        spec, content=content, content_type="application/json", headers=headers(content)
    )
    assert (verdict.valid, verdict.problem) == (problem is None, problem)
    summary = verdict.summary()
    recorded = [(d["source"], d["algorithm"], d["matches"]) for d in summary.get("digests", [])]
    assert recorded == checks
    if note is None:
        assert "integrity_notes" not in summary
    else:
        assert any(n.startswith(note) for n in summary["integrity_notes"]), summary


# --- through the collect decision, with the shipped openai_batch contract ---------------------


def _collecting(ctx: StepContext) -> tuple[Any, Send]:
    op = operation(
        OperationState.result_collecting,
        provider=ctx.contract.name,
        remote_job_id="batch_abc123",
        result_reference="file-xyz789",
        accepted_at=NOW,
        collect_deadline=NOW + timedelta(minutes=5),
        validation_summary={"expected": {}},
    )
    decided = before_collect(op, ctx, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


def test_openai_batch_a_download_contradicting_its_repr_digest_ends_result_validation_failed() -> (
    None
):
    ctx = context("openai_batch")
    op, send = _collecting(ctx)
    # Every result fetch asks for the bytes as sent, so a header digest can be compared.
    assert send.request.url == "https://api.openai.com/v1/files/file-xyz789/content"
    assert send.request.headers == {"accept-encoding": "identity"}

    headers = {"Repr-Digest": f"sha-256=:{sha256(OPENAI_LINE)}:"}
    altered = OPENAI_LINE.replace(b"chatcmpl-1", b"chatcmpl-7")
    answer = reply(200, content=altered, content_type="application/octet-stream", headers=headers)
    decided = after_collect(op, ctx, send.request, answer, NOW, 1.0)
    assert isinstance(decided.action, Finish)
    assert decided.action.state is OperationState.result_validation_failed
    assert decided.action.reason == "checksum mismatch"
    summary = decided.action.summary
    assert summary is not None and summary["problem"] == "checksum mismatch"
    (check,) = summary["digests"]
    assert (check["source"], check["theirs"], check["ours"]) == (
        "Repr-Digest",
        f":{sha256(OPENAI_LINE)}:",
        f":{sha256(altered)}:",
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [OperationState.result_validation_failed]
    assert p.result is None  # the contradicted bytes are never stored

    intact = reply(
        200, content=OPENAI_LINE, content_type="application/octet-stream", headers=headers
    )
    succeeded = after_collect(op, ctx, send.request, intact, NOW, 1.0).action
    assert isinstance(succeeded, Succeed) and succeeded.verdict is not None
    assert succeeded.verdict.summary()["digests"] == [
        {
            "source": "Repr-Digest",
            "algorithm": "sha-256",
            "ours": f":{sha256(OPENAI_LINE)}:",
            "theirs": f":{sha256(OPENAI_LINE)}:",
            "matches": True,
        }
    ]


def test_an_inline_result_has_no_answer_of_its_own_and_nothing_to_check() -> None:
    # google_aip151: the Operation's response field is the result; no download, no headers.
    ctx = context("google_aip151")
    op = operation(
        OperationState.result_collecting,
        provider="google_aip151",
        remote_job_id="operations/op-1",
        accepted_at=NOW,
        collect_deadline=NOW + timedelta(minutes=5),
        validation_summary={"expected": {"inline": {"@type": "x", "name": "r"}}},
    )
    decided = before_collect(op, ctx, NOW)
    assert isinstance(decided.action, Succeed) and decided.action.verdict is not None
    assert decided.action.verdict.digests == ()
    assert decided.action.verdict.integrity_notes == ()


# --- what the contract's digests still says: which fields are required -----------------------

GOOG = ResultSpec(fetch="url", content_type=None, digests=(DigestField.x_goog_hash,))


@pytest.mark.parametrize(
    ("spec", "headers", "problem", "checks"),
    [
        pytest.param(
            GOOG,
            {"repr-digest": f"sha-256=:{sha256(HELLO)}:"},
            "the provider gave no usable digest in x-goog-hash",
            [("Repr-Digest", True)],
            id="a-right-unlisted-field-does-not-meet-the-listed-requirement",
        ),
        pytest.param(
            replace(GOOG, digests_required=False),
            {"repr-digest": f"sha-256=:{sha256(HELLO)}:"},
            None,
            [("Repr-Digest", True)],
            id="not-required-a-right-unlisted-field-passes",
        ),
        pytest.param(
            GOOG,
            {"repr-digest": f"sha-256=:{sha256(WRONG)}:"},
            "checksum mismatch",
            [("Repr-Digest", False)],
            id="a-mismatch-is-named-before-a-missing-required-field",
        ),
        pytest.param(
            GOOG,
            {"x-goog-hash": f"md5={md5(HELLO)}", "content-md5": md5(HELLO)},
            None,
            [("Content-MD5", True), ("x-goog-hash", True)],
            id="the-listed-field-meets-it-and-the-other-is-checked-too",
        ),
        pytest.param(
            GOOG,
            {"x-goog-hash": "crc32c=%%%", "content-md5": "%%%"},
            "the provider gave no usable digest in x-goog-hash "
            "(x-goog-hash ignored: malformed (not base64))",
            [],
            id="the-requirements-problem-quotes-only-the-listed-fields-notes",
        ),
    ],
)
def test_the_contracts_digests_name_the_fields_that_are_required(
    spec: ResultSpec,
    headers: dict[str, str],
    problem: str | None,
    checks: list[tuple[str, bool]],
) -> None:
    verdict = validate_result(spec, content=HELLO, content_type=None, headers=headers)
    assert verdict.problem == problem
    assert [(c.source, c.matches) for c in verdict.digests] == checks


def test_an_unlisted_digest_of_gzip_coded_bytes_that_were_not_kept_is_noted_not_failed() -> None:
    # The edge asks for identity; a provider that sends gzip anyway is inflated by the edge,
    # and a digest of the coded bytes cannot be compared with the inflated ones.
    coded = gzip.compress(HELLO, mtime=0)
    headers = {"content-encoding": "gzip", "repr-digest": f"sha-256=:{sha256(coded)}:"}
    spec = ResultSpec(fetch="url", content_type=None)
    verdict = validate_result(spec, content=HELLO, content_type=None, headers=headers)
    assert verdict.valid and verdict.digests == ()
    assert verdict.integrity_notes == (
        "Repr-Digest sha-256 covers the gzip-coded bytes, which were not kept",
    )
