"""Provider contract files: the shipped four load as described, broken ones are named precisely."""

from __future__ import annotations

import dataclasses
import pickle
import tomllib
from pathlib import Path

import pytest

from jobwarden.models.contracts import loader as contract_loader
from jobwarden.models.contracts.contract import (
    AuthSpec,
    Breaker,
    CancelSpec,
    CleanupSpec,
    ConcurrencySpec,
    Convention,
    CreateSpec,
    DigestField,
    FinalStateVia,
    JobLocator,
    Limits,
    PollPolicy,
    ProviderContract,
    RateLimit,
    ReconciliationPath,
    ReconciliationSpec,
    RemoteStatus,
    ResultSpec,
    StateTable,
    StatusSpec,
    TokenPlacement,
    WebhookSpec,
)
from jobwarden.models.contracts.loader import (
    DIRECTORY_FIELD,
    FILE_FIELD,
    SHIPPED_CONTRACTS_DIR,
    check_contracts,
    effective_base_url,
    load_contract,
    load_contracts,
)
from jobwarden.models.contracts.plugins import OutboundRequest, is_plugin_spec, load_plugin
from jobwarden.models.contracts.sections import TopLevel
from jobwarden.models.errors import ContractError

FIXTURES = Path(__file__).parent / "contracts"
BROKEN = FIXTURES / "broken"
SANDBOX_TEXT = (SHIPPED_CONTRACTS_DIR / "sandbox.toml").read_text()


def shipped(name: str) -> ProviderContract:
    return load_contract(SHIPPED_CONTRACTS_DIR / f"{name}.toml")


def write_sandbox(tmp_path: Path, old: str, new: str, *, count: int = 1) -> Path:
    """The shipped sandbox contract with one textual change, saved as sandbox.toml."""
    assert old in SANDBOX_TEXT, f"fixture text not found: {old!r}"
    path = tmp_path / "sandbox.toml"
    path.write_text(SANDBOX_TEXT.replace(old, new, count))
    return path


# --- the shipped contracts ----------------------------------------------------


def test_all_shipped_contracts_load_without_problems() -> None:
    contracts, errors = check_contracts(SHIPPED_CONTRACTS_DIR)
    assert errors == []
    assert sorted(contracts) == [
        "azure_arm",
        "azure_lro",
        "google_aip151",
        "openai_batch",
        "sandbox",
        "sandbox_capture",
        "sandbox_deploy",
        "sandbox_export",
        "sandbox_payments",
        "sandbox_refund",
        "sandbox_rollback",
    ]
    assert load_contracts(SHIPPED_CONTRACTS_DIR).keys() == contracts.keys()


def test_sandbox_contract_describes_the_sandbox_api() -> None:
    c = shipped("sandbox")
    assert c.source_file == str(SHIPPED_CONTRACTS_DIR / "sandbox.toml")
    assert (c.base_url, c.base_url_env) == ("http://127.0.0.1:8765", "JOBWARDEN_SANDBOX_URL")
    assert c.auth is not None
    assert (c.auth.scheme, c.auth.header, c.auth.secret_env) == (
        "bearer",
        "Authorization",
        "JOBWARDEN_SANDBOX_TOKEN",
    )
    assert c.create.method == "POST" and c.create.path == "/v1/jobs"
    assert c.create.token_placement is TokenPlacement.header
    assert c.create.token_name == "Idempotency-Key"
    assert c.create.job_locator is JobLocator.body and c.create.job_id_pointer == "/id"
    assert c.create.in_flight_statuses == (409,)
    assert c.status.path == "/v1/jobs/{job_id}"
    assert c.status.state_pointer == "/status"
    assert c.status.poll_hint_pointer == "/poll_after_seconds"
    assert c.status.expiry_pointer == "/expires_at"
    assert c.status.result_ref_pointer == "/result/url"
    assert c.status.not_found_grace_seconds == 30
    assert c.states.classify("queued") is RemoteStatus.pending
    assert c.states.classify("cancelling") is RemoteStatus.pending
    assert c.states.cancelling == {"cancelling"}
    assert c.states.classify("expired") is RemoteStatus.expired
    assert c.states.classify("paused") is RemoteStatus.unknown
    assert c.cancel is not None and c.cancel.path == "/v1/jobs/{job_id}/cancel"
    assert c.reconciliation.path is ReconciliationPath.same_token_retry
    assert c.result is not None
    assert (c.result.fetch, c.result.checksum_pointer) == ("url", "/result/sha256")
    assert (c.result.items_pointer, c.result.failed_items_pointer) == ("/items", "/failed_items")
    assert c.result.record_count_pointer == "/record_count"
    assert c.poll.initial_delay_seconds == 0.2 and c.poll.max_seconds == 5
    assert c.requires_approval is False and c.plugin is None and c.webhook is None


def test_azure_contract_follows_the_azure_lro_convention_with_routes_for_one_api() -> None:
    c = shipped("azure_lro")
    assert c.convention is Convention.azure_lro
    assert c.create.token_name == "Repeatability-Request-ID"
    assert c.create.token_placement is TokenPlacement.header
    # The convention names the monitor (Operation-Location) and where the state sits.
    assert c.create.job_locator is JobLocator.convention
    assert c.status.path is None and c.status.state_pointer is None
    assert [c.states.classify(s) for s in ("NotStarted", "running", "Succeeded")] == [
        RemoteStatus.pending,
        RemoteStatus.pending,
        RemoteStatus.succeeded,
    ]
    assert c.states.classify("Failed") is RemoteStatus.failed
    assert c.states.classify("Canceled") is RemoteStatus.cancelled
    # Azure-core reads any other status as still running; so does the contract.
    assert c.states.classify("InProgress") is RemoteStatus.pending
    assert c.auth is not None and (c.auth.scheme, c.auth.header) == (
        "header",
        "Ocp-Apim-Subscription-Key",
    )
    assert c.result is not None and c.result.fetch == "inline"
    assert c.status.result_ref_pointer == "/result"
    assert set(c.create.routes) == {"create-or-replace", "delete"}
    assert c.create.routes["delete"].method == "DELETE"
    assert c.cancel is None
    assert c.reconciliation.path is ReconciliationPath.same_token_retry


def test_azure_arm_contract_serves_put_patch_delete_and_post_of_one_api() -> None:
    c = shipped("azure_arm")
    assert c.convention is Convention.azure_arm
    # No final_state_via on the PUT (issue 34): the convention's default reads the resource.
    assert (c.create.method, c.create.final_state_via) == ("PUT", None)
    methods = {name: r.method for name, r in c.create.routes.items()}
    assert methods == {
        "update": "PATCH",
        "delete": "DELETE",
        "child": "PUT",
        "child-update": "PATCH",
        "child-delete": "DELETE",
        "subscription-resource": "PUT",
        "tenant-resource": "PUT",
        "extension": "PUT",
        "resource-action": "POST",
        "subscription-action": "POST",
    }
    assert c.create.routes["resource-action"].final_state_via is FinalStateVia.location
    assert c.create.route_pointer == "/action"
    # No [states] in the file: ARM's rule, every state but the three terminal ones runs.
    assert c.states.otherwise is RemoteStatus.pending and c.states.case_insensitive
    assert c.states.classify("Updating") is RemoteStatus.pending
    assert c.states.classify("canceled") is RemoteStatus.cancelled


def test_google_contract_sends_request_id_in_the_body_and_reads_done_and_error() -> None:
    c = shipped("google_aip151")
    assert c.create.token_placement is TokenPlacement.body
    assert c.create.token_name == "request_id"
    assert c.create.job_id_pointer == "/name"
    assert c.status.path == "/v1/{job_id}"
    assert c.status.state_pointer == "/done"
    assert c.status.error_pointer == "/error"
    assert c.status.state_default == "false"
    assert c.states.classify("false") is RemoteStatus.pending
    assert c.states.classify("true") is RemoteStatus.succeeded
    assert c.states.failed == frozenset()
    assert c.status.result_ref_pointer == "/response"
    assert c.result is not None and c.result.fetch == "inline"
    assert c.cancel is not None and c.cancel.path == "/v1/{job_id}:cancel"


def test_openai_contract_downloads_the_output_file_as_jsonl() -> None:
    c = shipped("openai_batch")
    assert c.create.path == "/v1/batches" and c.create.token_name == "Idempotency-Key"
    for raw in ("validating", "in_progress", "finalizing"):
        assert raw in c.states.pending
    assert c.states.cancelling == {"cancelling"}
    assert c.states.classify("completed") is RemoteStatus.succeeded
    assert c.states.classify("expired") is RemoteStatus.expired
    assert c.states.classify("cancelled") is RemoteStatus.cancelled
    assert c.status.result_ref_pointer == "/output_file_id"
    assert c.result is not None
    assert (c.result.fetch, c.result.path) == ("path", "/v1/files/{result_ref}/content")
    assert c.result.jsonl is True
    assert c.result.content_type is None
    assert c.cancel is not None and c.cancel.path == "/v1/batches/{job_id}/cancel"
    assert c.auth is not None and c.auth.secret_env == "JOBWARDEN_OPENAI_API_KEY"
    assert c.requires_approval is True
    # OpenAI's expires_at is Unix seconds; the status reader takes those as well as RFC 3339.
    assert c.status.expiry_pointer == "/expires_at"


def test_a_contract_using_every_optional_table_keeps_every_value() -> None:
    c = load_contract(FIXTURES / "valid" / "full_featured.toml")
    assert c.plugin == "tests.unit.test_contract_loader:SigningPlugin"
    assert c.extra_headers == {"X-Client": "jobwarden", "Accept": "application/json"}
    assert c.auth is not None and c.auth.secret_file == "/run/secrets/full_featured"
    assert c.auth.secret_env is None
    assert c.create.job_locator is JobLocator.location and c.status.path is None
    assert c.create.accepted_statuses == (201, 202) and c.create.body_template == "wrapped"
    assert c.cancel is not None and c.cancel.method == "DELETE"
    assert c.cancel.accepted_statuses == (200, 202, 204)  # the default
    assert c.reconciliation.path is ReconciliationPath.lookup_by_reference
    assert c.reconciliation.lookup_path == "/v2/exports?client_reference={token}"
    assert c.reconciliation.lookup_job_id_pointer == "/data/0/id"
    assert c.result is not None
    assert c.result.allowed_origins == (
        "https://files.example.com",
        "https://backup.example.com:8443",
    )
    assert c.result.digests == (DigestField.repr_digest, DigestField.content_digest)
    assert c.result.digests_required is False
    assert (c.result.checksum_algorithm, c.result.checksum_encoding) == ("md5", "base64")
    assert (c.result.max_bytes, c.result.max_failed_fraction) == (1024, 0.02)
    assert c.webhook is not None
    assert c.webhook.secret_env == "JOBWARDEN_FULL_WEBHOOK_SECRET"
    assert c.webhook.tolerance_seconds == 120
    assert c.poll.initial_delay_seconds == 0 and c.poll.jitter_floor == 1
    assert c.poll.growth_factor == 1.5
    assert c.limits.max_create_attempts == 1


def test_a_webhook_secret_may_come_from_a_file_with_the_default_tolerance() -> None:
    c = load_contract(FIXTURES / "valid" / "webhook_secret_file.toml")
    assert c.webhook is not None
    assert c.webhook.secret_file == "/run/secrets/sandbox_webhook"
    assert c.webhook.secret_env is None
    assert c.webhook.tolerance_seconds == 300


def test_omitted_optional_fields_take_the_dataclass_defaults(tmp_path: Path) -> None:
    text = SANDBOX_TEXT
    for line in (
        "accepted_statuses = [200, 201, 202]\n",
        'body_template = "command"\n',
        "max_create_attempts = 5\n",
        "requires_approval = false\n",
    ):
        text = text.replace(line, "")
    (tmp_path / "sandbox.toml").write_text(text)
    c = load_contract(tmp_path / "sandbox.toml")
    assert c.create.accepted_statuses == (200, 201, 202)
    assert c.create.body_template == "command"
    assert c.limits.max_create_attempts == 5
    assert c.requires_approval is False


# --- broken fixture files -----------------------------------------------------

BROKEN_CASES = [
    ("unknown_key", "status.progres_pointer", "unknown field; did you mean 'progress_pointer'?"),
    ("missing_required", "create.job_id_pointer", "required when create.job_locator = 'body'"),
    ("bad_enum", "create.token_placement", "must be one of: header, body"),
    ("negative_number", "poll.max_seconds", "must be a positive number, got -3"),
    ("literal_secret", "auth.token", "looks like a literal secret"),
    ("state_in_two_classes", "states.failed", "'running' is already listed in states.pending"),
    ("missing_job_id", "status.path", "must contain {job_id}"),
    ("invalid_toml", FILE_FIELD, "not valid TOML"),
    ("name_mismatch", "name", "must equal the file name 'name_mismatch'"),
]


@pytest.mark.parametrize(("stem", "field", "problem"), BROKEN_CASES)
def test_broken_fixture_is_rejected_naming_file_and_field(
    stem: str, field: str, problem: str
) -> None:
    path = BROKEN / f"{stem}.toml"
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert caught.value.file == str(path)
    assert caught.value.field == field
    assert problem in caught.value.problem


def test_check_contracts_collects_every_problem_of_every_file() -> None:
    contracts, errors = check_contracts(BROKEN)
    assert contracts == {}
    found = {(Path(e.file).stem, e.field) for e in errors}
    for stem, field, _ in BROKEN_CASES:
        assert (stem, field) in found
    # A literal secret also leaves [auth] without its reference: both are reported.
    assert ("literal_secret", "auth.secret_env") in found


def test_check_contracts_returns_the_valid_contracts_beside_the_problems(tmp_path: Path) -> None:
    (tmp_path / "sandbox.toml").write_text(SANDBOX_TEXT)
    for stem in ("bad_enum", "negative_number"):
        (tmp_path / f"{stem}.toml").write_text((BROKEN / f"{stem}.toml").read_text())
    (tmp_path / "notes.txt").write_text("not a contract")
    contracts, errors = check_contracts(tmp_path)
    assert list(contracts) == ["sandbox"]
    assert [(Path(e.file).name, e.field) for e in errors] == [
        ("bad_enum.toml", "create.token_placement"),
        ("negative_number.toml", "poll.max_seconds"),
    ]


def test_one_file_reports_a_problem_per_broken_section(tmp_path: Path) -> None:
    text = (
        SANDBOX_TEXT.replace("jitter_floor = 0.5", "jitter_floor = 2")
        .replace("max_status_requests = 200", "max_status_requests = 0")
        .replace('token_placement = "header"', 'token_placment = "header"')
    )
    (tmp_path / "sandbox.toml").write_text(text)
    _, errors = check_contracts(tmp_path)
    assert [e.field for e in errors] == [
        "create.token_placment",
        "create.token_placement",
        "poll.jitter_floor",
        "limits.max_status_requests",
    ]


def test_a_misspelt_table_is_unknown_and_the_required_table_missing(tmp_path: Path) -> None:
    path = write_sandbox(tmp_path, "[reconciliation]", "[reconciliations]")
    _, errors = check_contracts(tmp_path)
    assert [(e.file, e.field, e.problem) for e in errors] == [
        (str(path), "reconciliations", "unknown field; did you mean 'reconciliation'?"),
        (str(path), "reconciliation", "required table is missing"),
    ]


def test_load_contracts_raises_the_single_problem_as_is(tmp_path: Path) -> None:
    (tmp_path / "bad_enum.toml").write_text((BROKEN / "bad_enum.toml").read_text())
    with pytest.raises(ContractError) as caught:
        load_contracts(tmp_path)
    assert caught.value.field == "create.token_placement"


def test_load_contracts_aggregates_several_problems_into_one_error() -> None:
    with pytest.raises(ContractError) as caught:
        load_contracts(BROKEN)
    assert caught.value.file == str(BROKEN)
    assert caught.value.field == DIRECTORY_FIELD
    assert "status.progres_pointer" in caught.value.problem
    assert "poll.max_seconds" in caught.value.problem


@pytest.mark.parametrize("make", ["missing", "empty", "file"])
def test_a_missing_or_empty_contracts_directory_is_one_error(tmp_path: Path, make: str) -> None:
    directory = tmp_path / "providers"
    if make == "empty":
        directory.mkdir()
    elif make == "file":
        directory.write_text("")
    contracts, errors = check_contracts(directory)
    assert contracts == {}
    assert len(errors) == 1
    assert (errors[0].file, errors[0].field) == (str(directory), DIRECTORY_FIELD)
    with pytest.raises(ContractError):
        load_contracts(directory)


def test_unreadable_and_non_utf8_files_are_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(tmp_path / "absent.toml")
    assert caught.value.field == FILE_FIELD and "cannot be read" in caught.value.problem
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'name = "caf\xe9"\n')
    with pytest.raises(ContractError) as caught:
        load_contract(latin1)
    assert caught.value.field == FILE_FIELD and "not valid TOML" in caught.value.problem


def test_contract_error_pickles_with_its_fields() -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(BROKEN / "bad_enum.toml")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.file, copy.field, copy.problem) == (
        caught.value.file,
        caught.value.field,
        caught.value.problem,
    )


# --- one rule at a time, on the sandbox contract ----------------------------------

WEBHOOK = (
    '[webhook]\nsignature_header = "X-Sig"\ntimestamp_header = "X-Ts"\nevent_id_pointer = "/id"\n'
)

RULES = [
    # (old text, new text, dotted field, problem fragment)
    ('base_url = "http://127.0.0.1:8765"', 'base_url = "127.0.0.1:8765"', "base_url", "absolute"),
    (
        'base_url = "http://127.0.0.1:8765"',
        'base_url = "ftp://127.0.0.1"',
        "base_url",
        "absolute http(s)",
    ),
    (
        'base_url = "http://127.0.0.1:8765"',
        'base_url = "http://127.0.0.1:8765/"',
        "base_url",
        "must not end with '/'",
    ),
    (
        'base_url = "http://127.0.0.1:8765"',
        'base_url = "http://user:hunter2@127.0.0.1"',
        "base_url",
        "must not carry credentials",
    ),
    ('name = "sandbox"', 'name = "Sandbox"', "name", "lower case"),
    ('name = "sandbox"\n', "", "name", "required"),
    ("requires_approval = false", 'requires_approval = "no"', "requires_approval", "true or false"),
    (
        "requires_approval = false",
        'requires_approval = false\nplugin = "not a spec"',
        "plugin",
        "'package.module:attribute'",
    ),
    ("requires_approval = false", "colour = 1", "colour", "unknown field"),
    ("[auth]", "[auth]\nsecret_file = '/run/x'", "auth.secret_env", "exactly one of"),
    ("[auth]", "[auth]\npassword = 'x'", "auth.password", "literal secret"),
    ("[auth]", "[auth]\napi-key = 'x'", "auth.api-key", "literal secret"),
    (
        'secret_env = "JOBWARDEN_SANDBOX_TOKEN"',
        'secret_env = "sk-live-1234"',
        "auth.secret_env",
        "must name an environment variable",
    ),
    (
        'secret_env = "JOBWARDEN_SANDBOX_TOKEN"',
        'secret_file = "secrets/token"',
        "auth.secret_file",
        "absolute path",
    ),
    ('scheme = "bearer"', 'scheme = "basic"', "auth.scheme", "must be one of: bearer, header"),
    (
        '[auth]\nscheme = "bearer"\nsecret_env = "JOBWARDEN_SANDBOX_TOKEN"\n',
        "auth = 3\n",
        "auth",
        "must be a table",
    ),
    (
        'method = "POST"\npath = "/v1/jobs"',
        'method = "GET"\npath = "/v1/jobs"',
        "create.method",
        "",
    ),
    ('path = "/v1/jobs"', 'path = "v1/jobs"', "create.path", "must start with '/'"),
    ('path = "/v1/jobs"', 'path = "/v1/{tenant}/jobs"', "create.path", "unknown placeholder"),
    ('token_name = "Idempotency-Key"', 'token_name = "Idempotency Key"', "create.token_name", ""),
    ('token_name = "Idempotency-Key"', 'token_name = ""', "create.token_name", "empty"),
    ('job_locator = "body"', 'job_locator = "header"', "create.job_locator", "must be one of"),
    ('job_id_pointer = "/id"', 'job_id_pointer = "id"', "create.job_id_pointer", "JSON pointer"),
    (
        "in_flight_statuses = [409]",
        "in_flight_statuses = [200]",
        "create.in_flight_statuses[0]",
        "4xx status code",
    ),
    (
        "in_flight_statuses = [409]",
        "conflict_status = 422",
        "create.conflict_status",
        "did you mean 'in_flight_statuses'",
    ),
    (
        "accepted_statuses = [200, 201, 202]",
        "accepted_statuses = [200, 404]",
        "create.accepted_statuses[1]",
        "2xx",
    ),
    (
        "accepted_statuses = [200, 201, 202]",
        "accepted_statuses = []",
        "create.accepted_statuses",
        "",
    ),
    ('body_template = "command"', 'body_template = "raw"', "create.body_template", "command"),
    ('job_locator = "body"', 'job_locator = "location"', "status.path", "must be absent"),
    ('state_pointer = "/status"\n', "", "status.state_pointer", "required"),
    (
        'path = "/v1/jobs/{job_id}"\n',
        'path = "/v1/jobs/{job_id"\n',
        "status.path",
        "unbalanced",
    ),
    (
        'state_pointer = "/status"',
        'state_pointer = "/status"\nerror_pointer = ""',
        "status.error_pointer",
        "",
    ),
    (
        "not_found_grace_seconds = 30",
        "not_found_grace_seconds = -1",
        "status.not_found_grace_seconds",
        "zero or a positive",
    ),
    (
        "not_found_grace_seconds = 30",
        "not_found_grace_seconds = nan",
        "status.not_found_grace_seconds",
        "finite",
    ),
    (
        'state_pointer = "/status"',
        'state_pointer = "/status"\nstate_default = "paused"',
        "status.state_default",
        "not listed in any class",
    ),
    ('pending = ["queued", "running"]', "pending = []", "states.pending", "at least one"),
    ('succeeded = ["succeeded"]\n', "", "states.succeeded", "required"),
    ('failed = ["failed"]', "failed = []", "states.failed", "or set status.error_pointer"),
    ('failed = ["failed"]', "failed = [false]", "states.failed[0]", '"true"/"false"'),
    (
        'cancelling = ["cancelling"]',
        'cancelling = ["cancelled"]',
        "states.cancelled",
        "already listed",
    ),
    ('path = "/v1/jobs/{job_id}/cancel"', 'path = "/v1/jobs/cancel"', "cancel.path", "{job_id}"),
    (
        'path = "same_token_retry"',
        'path = "lookup_by_reference"',
        "reconciliation.lookup_path",
        "required",
    ),
    (
        'path = "same_token_retry"',
        'path = "lookup_by_reference"\nlookup_path = "/v1/jobs?reference=x"',
        "reconciliation.lookup_path",
        "must contain {token}",
    ),
    (
        'path = "same_token_retry"',
        'path = "lookup_by_reference"\nlookup_path = "/v1/jobs?reference={token}"',
        "reconciliation.lookup_job_id_pointer",
        "required",
    ),
    (
        'path = "same_token_retry"',
        'path = "same_token_retry"\nlookup_path = "/v1/jobs?reference={token}"',
        "reconciliation.lookup_path",
        "only allowed",
    ),
    ('path = "same_token_retry"', 'path = "retry"', "reconciliation.path", "none"),
    ('fetch = "url"', 'fetch = "path"', "result.path", "required when result.fetch = 'path'"),
    ('fetch = "url"', 'fetch = "url"\npath = "/x/{job_id}"', "result.path", "only allowed"),
    ('result_ref_pointer = "/result/url"\n', "", "status.result_ref_pointer", "required when"),
    (
        'fetch = "url"',
        'fetch = "url"\nallowed_origins = ["https://files.example.com/path"]',
        "result.allowed_origins[0]",
        "origin",
    ),
    (
        "max_failed_fraction = 0.5",
        "max_failed_fraction = 1.5",
        "result.max_failed_fraction",
        "between 0 and 1",
    ),
    ("max_bytes = 10485760", "max_bytes = 1.5", "result.max_bytes", "whole number"),
    ("max_bytes = 10485760", "max_bytes = 0", "result.max_bytes", "positive whole number"),
    ("jitter_floor = 0.5", "jitter_floor = 1.5", "poll.jitter_floor", "between 0 and 1"),
    (
        "base_seconds = 0.2",
        "base_seconds = 6",
        "poll.base_seconds",
        "must not exceed poll.max_seconds",
    ),
    ("hint_floor_seconds = 0.1", "hint_floor_seconds = 31", "poll.hint_floor_seconds", "hint_cap"),
    ("max_seconds = 5", 'max_seconds = "5"', "poll.max_seconds", "must be a number"),
    ("max_seconds = 5", "max_seconds = 5000000000", "poll.max_seconds", "at most"),
    ("max_rate_limited = 5", "max_rate_limited = 0", "poll.max_rate_limited", "positive whole"),
    (
        "max_rate_limited = 5",
        "max_rate_limited = 5\ngrowth_factor = 1.01",
        "poll.growth_factor",
        "must be between 1.05 and 4, got 1.01",
    ),
    (
        "max_rate_limited = 5",
        "max_rate_limited = 5\ngrowth_factor = 5",
        "poll.growth_factor",
        "got 5",
    ),
    ("max_rate_limited = 5", "max_rate_limited = 5\ngrowth_factor = nan", "poll.growth_factor", ""),
    (
        "max_rate_limited = 5",
        'max_rate_limited = 5\ngrowth_factor = "1.5"',
        "poll.growth_factor",
        "must be a number",
    ),
    (
        'started_at_pointer = "/started_at"',
        'started_at_pointer = "started_at"',
        "status.started_at_pointer",
        "JSON pointer",
    ),
    ("rate_limit_base_seconds = 1\n", "", "poll.rate_limit_base_seconds", "required"),
    (
        "max_transport_failures = 10",
        "max_transport_failures = -1",
        "limits.max_transport_failures",
        "",
    ),
    (
        "request_timeout_seconds = 5",
        "request_timeout_seconds = 90",
        "limits.request_timeout_seconds",
        "create_deadline",
    ),
    (
        "request_timeout_seconds = 5",
        "request_timeout_seconds = 0",
        "limits.request_timeout_seconds",
        "positive",
    ),
    ("[limits]", "[limits]\nmax_status_request = 3", "limits.max_status_request", "did you mean"),
    (
        "requires_approval = false",
        'extra_headers = { Authorization = "Bearer abc" }',
        "extra_headers.Authorization",
        "credential",
    ),
    (
        "requires_approval = false",
        'extra_headers = { "Idempotency-Key" = "fixed" }',
        "extra_headers.Idempotency-Key",
        "create.token_name",
    ),
    (
        "requires_approval = false",
        "extra_headers = { X-Count = 3 }",
        "extra_headers.X-Count",
        "string",
    ),
    (
        "[poll]",
        WEBHOOK + 'job_id_pointer = "/job"\nsecret = "whsec_1"\n[poll]',
        "webhook.secret",
        "literal secret",
    ),
    (
        "[poll]",
        WEBHOOK + 'job_id_pointer = "/job"\nsecret_env = "WH"\ntolerance_seconds = 0\n[poll]',
        "webhook.tolerance_seconds",
        "positive",
    ),
]


@pytest.mark.parametrize(("old", "new", "field", "problem"), RULES)
def test_each_validation_rule_names_its_dotted_field(
    tmp_path: Path, old: str, new: str, field: str, problem: str
) -> None:
    path = write_sandbox(tmp_path, old, new)
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert (caught.value.file, caught.value.field) == (str(path), field), caught.value
    assert problem in caught.value.problem


def test_messages_about_secrets_never_echo_the_value(tmp_path: Path) -> None:
    for old, new in (
        ('secret_env = "JOBWARDEN_SANDBOX_TOKEN"', 'secret_env = "sk-live-1234"'),
        ('base_url = "http://127.0.0.1:8765"', 'base_url = "http://u:sk-live-1234@127.0.0.1"'),
        ("[auth]", '[auth]\ntoken = "sk-live-1234"'),
    ):
        _, errors = check_contracts(write_sandbox(tmp_path, old, new).parent)
        assert errors
        assert all("sk-live-1234" not in str(e) for e in errors)


def test_failed_may_be_empty_only_when_an_error_pointer_says_what_failure_is(
    tmp_path: Path,
) -> None:
    with pytest.raises(ContractError):
        load_contract(write_sandbox(tmp_path, 'failed = ["failed"]', "failed = []"))
    text = SANDBOX_TEXT.replace('failed = ["failed"]', "failed = []").replace(
        'state_pointer = "/status"', 'state_pointer = "/status"\nerror_pointer = "/error"'
    )
    (tmp_path / "sandbox.toml").write_text(text)
    assert load_contract(tmp_path / "sandbox.toml").states.failed == frozenset()


def test_every_table_model_has_exactly_the_fields_of_the_value_it_builds() -> None:
    # A field added to a models.contracts.contract dataclass without a key in its table model (or
    # the reverse) would be dropped or refused silently: the two must name the same fields.
    for key, (model, _) in contract_loader.SECTIONS.items():
        keys = {f.alias or name for name, f in model.model_fields.items()}
        if key == "command":
            assert keys == {"schema", "schema_file"}
            continue
        assert keys == {f.name for f in dataclasses.fields(model.builds)}, key
    top = {f.name for f in dataclasses.fields(ProviderContract)} - {"source_file"}
    # [follow_ups.<name>] is keyed by name: its tables are checked in test_follow_up_contracts.
    keyed = {contract_loader.FOLLOW_UPS}
    assert set(TopLevel.model_fields) | set(contract_loader.SECTIONS) | keyed == top


SPECS = {
    "": ProviderContract,
    "auth": AuthSpec,
    "create": CreateSpec,
    "status": StatusSpec,
    "states": StateTable,
    "cancel": CancelSpec,
    "cleanup": CleanupSpec,
    "reconciliation": ReconciliationSpec,
    "result": ResultSpec,
    "webhook": WebhookSpec,
    "poll": PollPolicy,
    "limits": Limits,
    "concurrency": ConcurrencySpec,
    "rate_limit": RateLimit,
    "breaker": Breaker,
}


def test_every_contract_field_is_set_by_some_shipped_or_fixture_file() -> None:
    files = [*SHIPPED_CONTRACTS_DIR.glob("*.toml"), *(FIXTURES / "valid").glob("*.toml")]
    seen: set[str] = set()
    for path in files:
        data = tomllib.loads(path.read_text())
        for prefix in SPECS:
            table = data.get(prefix, {}) if prefix else data
            seen |= {f"{prefix}.{key}" if prefix else key for key in table}
    expected = {
        f"{prefix}.{f.name}" if prefix else f.name
        for prefix, spec in SPECS.items()
        for f in dataclasses.fields(spec)
    } - {"source_file"}
    assert expected - seen == set()


def test_every_contract_field_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "contracts.md").read_text()
    for prefix, spec in SPECS.items():
        for f in dataclasses.fields(spec):
            if f.name != "source_file":
                documented = f"`{f.name}`" in doc or f"`[{f.name}]`" in doc
                assert documented, f"{prefix}.{f.name} is not in docs/contracts.md"


# --- base URL override ------------------------------------------------------------


def test_base_url_env_overrides_base_url_when_set() -> None:
    c = shipped("sandbox")
    assert effective_base_url(c, {}) == "http://127.0.0.1:8765"
    assert effective_base_url(c, {"JOBWARDEN_SANDBOX_URL": ""}) == "http://127.0.0.1:8765"
    env = {"JOBWARDEN_SANDBOX_URL": "http://sandbox:9000/"}
    assert effective_base_url(c, env) == "http://sandbox:9000"
    with pytest.raises(ContractError) as caught:
        effective_base_url(c, {"JOBWARDEN_SANDBOX_URL": "sandbox:9000"})
    assert caught.value.field == "base_url_env"


# --- plugins ---------------------------------------------------------------------


class SigningPlugin:
    """A plugin with both hooks, named by the full_featured fixture."""

    def prepare_request(self, request: OutboundRequest) -> OutboundRequest:
        return request.with_headers({"X-Signature": f"signed:{request.method}"})

    def extract_status(self, body: object) -> object:
        assert isinstance(body, dict)
        return {"state": body["outer"]["state"]}


class StatusOnlyPlugin:
    def extract_status(self, body: object) -> object:
        return {"wrapped": body}


class NoHooks:
    pass


class BadHook:
    prepare_request = "not callable"


class BrokenConstructor:
    def __init__(self) -> None:
        raise RuntimeError("no config")


def bad_return(request: OutboundRequest) -> object:
    return "oops"


class WrongReturn:
    prepare_request = staticmethod(bad_return)


PLUGIN_MODULE = "tests.unit.test_contract_loader"


def test_plugin_named_by_a_contract_loads_and_its_hooks_run() -> None:
    c = load_contract(FIXTURES / "valid" / "full_featured.toml")
    assert c.plugin is not None
    plugin = load_plugin(c.plugin, file=c.source_file)
    request = OutboundRequest(method="GET", url="https://api.example.com/x", headers={"A": "1"})
    prepared = plugin.prepare_request(request)
    assert prepared.headers == {"A": "1", "X-Signature": "signed:GET"}
    assert request.headers == {"A": "1"}  # the original is untouched
    assert plugin.extract_status({"outer": {"state": "done"}}) == {"state": "done"}


def test_a_missing_hook_passes_values_through_unchanged() -> None:
    plugin = load_plugin(f"{PLUGIN_MODULE}:StatusOnlyPlugin")
    request = OutboundRequest(method="POST", url="https://x.example", body=b"{}")
    assert plugin.prepare_request(request) is request
    assert plugin.extract_status(1) == {"wrapped": 1}


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("no_colon_here", "must have the form"),
        ("tests.unit.no_such_module:X", "could not import module 'tests.unit.no_such_module'"),
        (f"{PLUGIN_MODULE}:Missing", "has no attribute 'Missing'"),
        (f"{PLUGIN_MODULE}:NoHooks", "defines none of the hooks"),
        (f"{PLUGIN_MODULE}:BadHook", "prepare_request is not callable"),
        (f"{PLUGIN_MODULE}:BrokenConstructor", "could not construct"),
    ],
)
def test_a_plugin_that_cannot_be_used_is_a_contract_error(spec: str, problem: str) -> None:
    with pytest.raises(ContractError) as caught:
        load_plugin(spec, file="x.toml")
    assert (caught.value.file, caught.value.field) == ("x.toml", "plugin")
    assert problem in caught.value.problem


def test_a_plugin_returning_the_wrong_type_is_a_contract_error() -> None:
    plugin = load_plugin(f"{PLUGIN_MODULE}:WrongReturn")
    with pytest.raises(ContractError, match="not an OutboundRequest"):
        plugin.prepare_request(OutboundRequest(method="GET", url="https://x.example"))


@pytest.mark.parametrize(
    ("spec", "ok"),
    [("a:b", True), ("pkg.mod:Obj.attr", True), ("pkg.mod", False), ("pkg:1x", False), ("", False)],
)
def test_plugin_spec_syntax(spec: str, ok: bool) -> None:
    assert is_plugin_spec(spec) is ok
