"""The contract fields the conventions brought: each bad value is one error naming the
file and the field, and what the convention supplies is filled in."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from jobwarden.models.contracts.contract import (
    Convention,
    JobLocator,
    ProviderContract,
    RemoteStatus,
)
from jobwarden.models.contracts.loader import SHIPPED_CONTRACTS_DIR, check_contracts, load_contract
from jobwarden.models.provider.signals import read_status
from tests.unit.factories import NOW

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
            _arm('token_format = "uuid"', 'token_format = "uuid"\nfinal_state_via = "original"'),
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


# --- what google-aip151 and openai-batch supply (models/conventions/tables.py) -------------

VALID = Path(__file__).parent / "contracts" / "valid"


@pytest.mark.parametrize("name", ["google_aip151", "openai_batch"])
def test_a_convention_supplies_exactly_what_the_contract_once_spelt_out(name: str) -> None:
    # The shipped file leans on its convention; the fixture is the same contract before
    # the convention, every key written out. Built, the two must be the same contract.
    leaning = load_contract(SHIPPED_CONTRACTS_DIR / f"{name}.toml")
    spelt_out = load_contract(VALID / f"{name}_plain.toml")
    assert leaning.convention is Convention(name.replace("_aip", "-aip").replace("_b", "-b"))
    assert (
        replace(
            spelt_out, name=name, source_file=leaning.source_file, convention=leaning.convention
        )
        == leaning
    )


GOOGLE_MINIMAL = """
name = "g"
base_url = "https://example.googleapis.com"
convention = "google-aip151"
[create]
method = "POST"
path = "/v1/things:export"
token_placement = "body"
token_name = "request_id"
[status]
method = "GET"
path = "/v1/{job_id}"
[reconciliation]
path = "same_token_retry"
[poll]
initial_delay_seconds = 1
base_seconds = 1
max_seconds = 10
jitter_floor = 0.5
hint_floor_seconds = 0
hint_cap_seconds = 60
rate_limit_base_seconds = 1
max_rate_limited = 3
[limits]
create_deadline_seconds = 60
result_deadline_seconds = 600
cancel_deadline_seconds = 60
max_status_requests = 10
max_transport_failures = 3
request_timeout_seconds = 5
"""


def _google(tmp_path: Path, text: str = GOOGLE_MINIMAL) -> ProviderContract:
    (tmp_path / "g.toml").write_text(text)
    return load_contract(tmp_path / "g.toml")


def test_aip_151_reads_done_error_and_response_without_the_file_naming_them(
    tmp_path: Path,
) -> None:
    c = _google(tmp_path)
    assert (c.create.job_locator, c.create.job_id_pointer) == (JobLocator.body, "/name")
    assert (c.status.state_pointer, c.status.state_default) == ("/done", "false")
    assert (c.status.error_pointer, c.status.error_code_pointer) == ("/error", "/error/code")
    assert c.result is not None and c.result.fetch == "inline"
    assert c.status.result_ref_pointer == "/response"
    deadline = NOW.replace(year=NOW.year + 1)
    # [AIP-151] done absent or false: running; done with response: succeeded; done with
    # an error: failed, unless google.rpc.Code says CANCELLED (1) or DEADLINE_EXCEEDED (4).
    for body, outcome in [
        ({"name": "operations/x"}, RemoteStatus.pending),
        ({"name": "operations/x", "done": False}, RemoteStatus.pending),
        ({"done": True, "response": {"rows": 3}}, RemoteStatus.succeeded),
        ({"done": True, "error": {"code": 13, "message": "internal"}}, RemoteStatus.failed),
        ({"done": True, "error": {"code": 1, "message": "cancelled"}}, RemoteStatus.cancelled),
        ({"done": True, "error": {"code": 4, "message": "deadline"}}, RemoteStatus.expired),
    ]:
        assert read_status(c, body, now=NOW, deadline=deadline).remote_status is outcome, body


def test_a_key_the_file_gives_wins_and_takes_what_belongs_to_it_along(tmp_path: Path) -> None:
    text = GOOGLE_MINIMAL.replace(
        'path = "/v1/{job_id}"\n', 'path = "/v1/{job_id}"\nstate_pointer = "/metadata/phase"\n'
    ).replace(
        "[reconciliation]",
        '[states]\npending = ["RUNNING"]\nsucceeded = ["DONE"]\nfailed = []\n[reconciliation]',
    )
    c = _google(tmp_path, text)
    assert c.status.state_pointer == "/metadata/phase"
    # The convention's "false" default belongs to its /done: a file's own state has none.
    assert c.status.state_default is None
    # A [states] of the file's own replaces the convention's whole (no error_codes left).
    assert c.states.pending == {"RUNNING"} and c.states.error_codes == {}
    assert c.status.error_pointer == "/error"  # not given: still the convention's


def test_a_broken_convention_supplies_nothing_and_is_the_one_error(tmp_path: Path) -> None:
    # Without its convention this file lacks [states] and status.state_pointer; neither is
    # reported: the misspelt convention is the one mistake, so the one line.
    text = GOOGLE_MINIMAL.replace('convention = "google-aip151"', 'convention = "google"')
    errors = _errors(tmp_path, "g", text)
    assert [field for field, _ in errors] == ["convention"], errors
