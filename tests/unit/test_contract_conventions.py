"""The contract fields the conventions brought: each bad value is one error naming the
file and the field, and what the convention supplies is filled in."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobwarden.models.contract import Convention, JobLocator, RemoteStatus
from jobwarden.models.contract_loader import SHIPPED_CONTRACTS_DIR, check_contracts, load_contract

ARM_TEXT = (SHIPPED_CONTRACTS_DIR / "azure_arm.toml").read_text()
SANDBOX_TEXT = (SHIPPED_CONTRACTS_DIR / "sandbox.toml").read_text()


def _errors(tmp_path: Path, name: str, text: str) -> list[tuple[str, str]]:
    (tmp_path / f"{name}.toml").write_text(text)
    _, errors = check_contracts(tmp_path)
    return [(e.field, e.problem) for e in errors]


def _arm(old: str, new: str) -> str:
    assert old in ARM_TEXT, old
    return ARM_TEXT.replace(old, new, 1)


def _sandbox(old: str, new: str) -> str:
    assert old in SANDBOX_TEXT, old
    return SANDBOX_TEXT.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "field", "words"),
    [
        (_arm('convention = "azure-arm"', 'convention = "azure"'), "convention", "must be one of"),
        (
            _arm('route_pointer = "/action"', 'route_pointer = "/action"\njob_locator = "body"'),
            "create.job_locator",
            "the only locator",
        ),
        (
            _arm('route_pointer = "/action"\n', ""),
            "create.route_pointer",
            "go together",
        ),
        (
            _arm("[create.routes.update]", "[create.routes.Update]"),
            "create.routes.Update",
            "route name",
        ),
        (
            _arm('method = "PATCH"', 'method = "GET"'),
            "create.routes.update.method",
            "must be one of",
        ),
        (
            _arm('method = "PATCH"', 'method = "PATCH"\nmethd = "PATCH"'),
            "create.routes.update.methd",
            "did you mean 'method'?",
        ),
        (
            _arm('final_state_via = "original-uri"', 'final_state_via = "original"'),
            "create.final_state_via",
            "must be one of",
        ),
        (
            _arm("{command.subscription}/resourceGroups", "{job_id}/resourceGroups"),
            "create.path",
            "unknown placeholder {job_id}",
        ),
        (
            _arm('token_placement = "header"', 'token_placement = "body"').replace(
                'token_name = "Repeatability-Request-ID"', 'token_name = "request_id"'
            ),
            "create.token_placement",
            "a DELETE sends no body",
        ),
    ],
)
def test_a_bad_convention_field_is_one_error_naming_file_and_field(
    tmp_path: Path, text: str, field: str, words: str
) -> None:
    errors = _errors(tmp_path, "azure_arm", text)
    assert len(errors) == 1, errors
    assert errors[0][0] == field and words in errors[0][1], errors


def test_job_locator_convention_needs_an_azure_convention(tmp_path: Path) -> None:
    text = _sandbox('job_locator = "body"', 'job_locator = "convention"')
    errors = _errors(tmp_path, "sandbox", text)
    assert any(f == "create.job_locator" and "needs convention" in p for f, p in errors), errors


def test_a_plain_contract_still_needs_its_state_pointer_and_states(tmp_path: Path) -> None:
    text = _sandbox('state_pointer = "/status"\n', "")
    assert ("status.state_pointer", "required") in _errors(tmp_path, "sandbox", text)


def test_states_may_say_an_unlisted_state_is_pending_and_compare_without_case(
    tmp_path: Path,
) -> None:
    text = _sandbox("[states]\n", '[states]\notherwise = "pending"\ncase_insensitive = true\n')
    (tmp_path / "sandbox.toml").write_text(text)
    c = load_contract(tmp_path / "sandbox.toml")
    assert c.states.classify("brand-new") is RemoteStatus.pending
    assert c.states.classify("SUCCEEDED") is RemoteStatus.succeeded
    bad = _sandbox("[states]\n", '[states]\notherwise = "done"\n')
    errors = _errors(tmp_path, "sandbox", bad)
    assert [f for f, _ in errors] == ["states.otherwise"], errors


def test_an_azure_contract_gets_the_conventions_state_table_and_result(tmp_path: Path) -> None:
    text = _arm(
        '[result]\nfetch = "url" # the final GET: the resource, or the action\'s Location\n', ""
    )
    text = text.replace('content_type = "application/json"\n', "", 1)
    (tmp_path / "azure_arm.toml").write_text(text)
    c = load_contract(tmp_path / "azure_arm.toml")
    assert c.convention is Convention.azure_arm
    assert c.create.job_locator is JobLocator.convention
    assert c.result is not None and c.result.fetch == "url"
    assert c.states.classify("Deleting") is RemoteStatus.pending


def test_the_whole_status_body_may_be_the_inline_result(tmp_path: Path) -> None:
    text = _sandbox('result_ref_pointer = "/result/url"', 'result_ref_pointer = ""')
    text = text.replace('fetch = "url"', 'fetch = "inline"', 1)
    (tmp_path / "sandbox.toml").write_text(text)
    _, errors = check_contracts(tmp_path)
    assert not any(e.field == "status.result_ref_pointer" for e in errors), errors
