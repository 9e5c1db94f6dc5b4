"""Pinned contracts, the pure part (DESIGN.md invariant 16): the digest of a contract's
text, a kept text parsed again, the intent event that names it, and the report of which
running operations use which version."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.contracts.pins import (
    VersionUse,
    contract_digest,
    pinned_contract,
    read_version,
    short_digest,
    usage_lines,
)
from jobwarden.models.errors import ContractError
from jobwarden.models.intake.intent import Intake, open_operation
from tests.unit.factories import NOW, SHIPPED, submission

SANDBOX = (SHIPPED / "sandbox.toml").read_text(encoding="utf-8")
OLD, NEW = "a" * 64, "b" * 64


def test_the_digest_is_sha256_over_the_texts_utf8_bytes() -> None:
    assert contract_digest("é") == hashlib.sha256("é".encode()).hexdigest()


@given(st.text(), st.text())
def test_any_changed_character_is_a_changed_contract(one: str, other: str) -> None:
    assert (contract_digest(one) == contract_digest(other)) is (one == other)


@pytest.mark.parametrize(
    ("digest", "shown"), [("0123456789abcdef" * 4, "0123456789ab"), (None, "unpinned")]
)
def test_a_digest_is_shown_by_its_first_twelve_hex_digits(digest: str | None, shown: str) -> None:
    assert short_digest(digest) == shown


def test_a_file_is_read_once_for_its_digest_and_its_contract(tmp_path: Path) -> None:
    path = tmp_path / "sandbox.toml"
    path.write_bytes(SANDBOX.encode())
    version = read_version(path)
    assert (version.provider, version.digest, version.text) == (
        "sandbox",
        contract_digest(SANDBOX),
        SANDBOX,
    )
    assert version.contract.name == "sandbox"


def test_a_kept_text_parses_to_the_contract_it_was(tmp_path: Path) -> None:
    edited = SANDBOX.replace("max_status_requests = 200", "max_status_requests = 7")
    contract = pinned_contract("sandbox", edited, tmp_path / "sandbox.toml")
    assert contract.limits.max_status_requests == 7


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (SANDBOX.replace('name = "sandbox"', 'name = "other"'), "name"),
        (SANDBOX.replace("max_seconds = 5", 'max_seconds = "5"'), "poll.max_seconds"),
        ("name = ", "(file)"),
    ],
)
def test_a_kept_text_that_no_longer_fits_is_refused_naming_the_field(
    tmp_path: Path, text: str, field: str
) -> None:
    with pytest.raises(ContractError) as refused:
        pinned_contract("sandbox", text, tmp_path / "sandbox.toml")
    assert refused.value.field == field


@pytest.mark.parametrize("digest", [OLD, None])
def test_the_operation_and_its_intent_event_name_the_contract_it_was_created_under(
    digest: str | None,
) -> None:
    intake = Intake(
        operation_id=uuid.UUID(int=7),
        fingerprint="f" * 64,
        trace_id="a" * 32,
        actor="submitter:svc",
        contract_digest=digest,
    )
    contract = read_version(SHIPPED / "sandbox.toml").contract
    op, intent = open_operation(submission(), contract, None, NOW, intake=intake)
    assert op.contract_digest == digest
    excerpt = intent.events[0].excerpt or {}
    assert excerpt.get("contract_digest") == digest
    assert ("contract_digest" in excerpt) is (digest is not None)


@pytest.mark.parametrize(
    ("use", "line"),
    [
        (
            VersionUse(provider="sandbox", digest=NEW, operations=3),
            f"running sandbox  contract {NEW[:12]}  3 operations  (current)",
        ),
        (
            VersionUse(provider="sandbox", digest=OLD, operations=1),
            f"running sandbox  contract {OLD[:12]}  1 operation  "
            "(older version (jobwarden providers migrate moves them))",
        ),
        (
            VersionUse(provider="sandbox", digest=None, operations=2),
            "running sandbox  contract unpinned  2 operations  "
            "(created before pinning: polled under the current contract)",
        ),
        (
            VersionUse(provider="gone", digest=OLD, operations=1),
            f"running gone  contract {OLD[:12]}  1 operation  (provider no longer configured)",
        ),
    ],
)
def test_check_reports_each_version_with_its_running_operations(use: VersionUse, line: str) -> None:
    assert usage_lines([use], {"sandbox": NEW}) == [line]


def test_the_report_is_ordered_by_provider_then_version() -> None:
    uses = [
        VersionUse(provider="b", digest=NEW, operations=1),
        VersionUse(provider="a", digest=NEW, operations=1),
        VersionUse(provider="a", digest=None, operations=1),
        VersionUse(provider="a", digest=OLD, operations=1),
    ]
    lines = usage_lines(uses, {"a": NEW, "b": NEW})
    assert [line.split("  ")[0:2] for line in lines] == [
        ["running a", "contract unpinned"],
        ["running a", f"contract {OLD[:12]}"],
        ["running a", f"contract {NEW[:12]}"],
        ["running b", f"contract {NEW[:12]}"],
    ]
