"""Load provider contract files (TOML) into validated ``ProviderContract`` values.

One file per provider, named after it (``config/providers/<name>.toml``). The
TOML keys are exactly the field names of the dataclasses in
``models.contract``; one table per concern. Validation happens once, at
start-up, and names the file and the dotted field of every problem found
(``ContractError(file, "create.job_id_pointer", "required when ...")``).
Unknown keys are errors: a typo must never fall back to a default silently.

Pure: reads the files it is given and nothing else (no environment, no
imports of plugins; see ``models.plugins.load_plugin`` for that).
"""

from __future__ import annotations

import difflib
import math
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Concatenate, Final, ParamSpec, TypeVar, overload
from urllib.parse import urlsplit

from models.contract import (
    AuthSpec,
    CancelSpec,
    CreateSpec,
    JobLocator,
    Limits,
    PollPolicy,
    ProviderContract,
    ReconciliationPath,
    ReconciliationSpec,
    ResultSpec,
    StateTable,
    StatusSpec,
    TokenPlacement,
    WebhookSpec,
)
from models.errors import ContractError
from models.plugins import is_plugin_spec

__all__ = [
    "DIRECTORY_FIELD",
    "FILE_FIELD",
    "SHIPPED_CONTRACTS_DIR",
    "check_contracts",
    "effective_base_url",
    "load_contract",
    "load_contracts",
]

# The contracts that ship with jobwarden (config/providers/, a sibling package).
SHIPPED_CONTRACTS_DIR: Final = Path(__file__).resolve().parent.parent / "config" / "providers"

FILE_FIELD: Final = "(file)"  # the field of errors about the file as a whole
DIRECTORY_FIELD: Final = "(directory)"  # the field of errors about the contracts directory

# Sanity bounds: anything beyond these is a typo (minutes for seconds, an extra zero).
MAX_SECONDS: Final = 30 * 24 * 3600
MAX_COUNT: Final = 1_000_000
MAX_RESULT_BYTES: Final = 10 * 1024**3
MAX_REQUEST_TIMEOUT_SECONDS: Final = 600

# Keys that would hold a credential itself. Secrets never rest in a contract file.
_SECRET_KEYS: Final = frozenset(
    {
        "token",
        "secret",
        "password",
        "passwd",
        "api_key",
        "apikey",
        "key",
        "access_token",
        "auth_token",
        "bearer",
        "client_secret",
        "private_key",
        "credential",
        "credentials",
    }
)
_SECRET_HEADER_WORDS: Final = ("authorization", "cookie", "token", "secret", "password", "api-key")

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*\Z")
_ENV_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_PLACEHOLDER: Final = re.compile(r"\{([^{}]*)\}")

_CREATE_METHODS: Final = ("POST", "PUT", "PATCH")
_STATUS_METHODS: Final = ("GET", "POST")
_CANCEL_METHODS: Final = ("POST", "DELETE", "PUT", "PATCH")
_RESULT_FETCHES: Final = ("url", "inline", "path")
_BODY_TEMPLATES: Final = ("command", "wrapped")
_AUTH_SCHEMES: Final = ("bearer", "header")

_T = TypeVar("_T")
_E = TypeVar("_E", bound=StrEnum)
_P = ParamSpec("_P")


def load_contract(path: Path) -> ProviderContract:
    """Parse and validate one contract file.

    Raises ContractError naming the file and the dotted field of the first
    problem (the field is ``(file)`` when the file cannot be read or parsed).
    """
    contract, errors = _check_file(path)
    if errors:
        raise errors[0]
    assert contract is not None  # no errors means every section was built
    return contract


def check_contracts(
    directory: Path,
) -> tuple[dict[str, ProviderContract], list[ContractError]]:
    """Validate every ``*.toml`` in ``directory``; never raises ContractError.

    Returns the valid contracts by name and every problem found in every file
    (a file may contribute several). A missing directory, or one without
    contract files, is a single error with the field ``(directory)``.
    """
    if not directory.is_dir():
        problem = "is not a directory" if directory.exists() else "does not exist"
        return {}, [ContractError(str(directory), DIRECTORY_FIELD, problem)]
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        return {}, [
            ContractError(str(directory), DIRECTORY_FIELD, "holds no *.toml contract files")
        ]
    contracts: dict[str, ProviderContract] = {}
    errors: list[ContractError] = []
    for path in paths:
        contract, file_errors = _check_file(path)
        errors.extend(file_errors)
        if contract is not None:
            contracts[contract.name] = contract
    return contracts, errors


def load_contracts(directory: Path) -> dict[str, ProviderContract]:
    """All contracts in ``directory`` by name, or ContractError if any is invalid.

    With exactly one problem that error is raised as is; with several, one
    ContractError for the directory whose problem lists them all.
    """
    contracts, errors = check_contracts(directory)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        listing = "; ".join(str(error) for error in errors)
        raise ContractError(
            str(directory), DIRECTORY_FIELD, f"{len(errors)} contract problems: {listing}"
        )
    return contracts


def effective_base_url(contract: ProviderContract, environ: Mapping[str, str]) -> str:
    """The base URL to use: ``environ[base_url_env]`` when set and non-empty, else base_url.

    Raises ContractError (field ``base_url_env``) when the override is not an
    absolute http(s) URL; the value itself is not echoed.
    """
    if contract.base_url_env is None:
        return contract.base_url
    override = environ.get(contract.base_url_env, "").strip()
    if not override:
        return contract.base_url
    parts = urlsplit(override)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.password:
        raise ContractError(
            contract.source_file,
            "base_url_env",
            f"environment variable {contract.base_url_env} must hold an absolute http(s) URL",
        )
    return override.rstrip("/")


# --- one file -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _TopLevel:
    name: str
    base_url: str
    base_url_env: str | None
    requires_approval: bool
    plugin: str | None
    extra_headers: dict[str, str]


def _check_file(path: Path) -> tuple[ProviderContract | None, list[ContractError]]:
    """The contract (when valid) and every problem found, in file order."""
    file = str(path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        return None, [ContractError(file, FILE_FIELD, f"not valid TOML: {exc}")]
    except UnicodeDecodeError:
        return None, [ContractError(file, FILE_FIELD, "not valid TOML: the file is not UTF-8")]
    except OSError as exc:
        return None, [ContractError(file, FILE_FIELD, f"cannot be read: {exc.strerror}")]

    errors: list[ContractError] = []

    # Each section stops at its own first problem; the others are still checked,
    # so one run reports a problem per broken section.
    def run(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T | None:
        try:
            return fn(*args, **kwargs)
        except ContractError as exc:
            errors.append(exc)
            return None

    root = _Table(file, "", data)
    top_fields = _field_names(ProviderContract) - {"source_file"}
    errors.extend(root.unknown_keys(top_fields))
    top = run(_parse_top, root, path.stem)

    def section(
        key: str,
        spec: type,
        required: bool,
        parse: Callable[Concatenate[_Table, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T | None:
        value = root.get(key)
        if value is None:
            if required:
                errors.append(ContractError(file, key, "required table is missing"))
            return None
        if not isinstance(value, dict):
            errors.append(ContractError(file, key, f"must be a table, got {_toml_type(value)}"))
            return None
        table = _Table(file, key, value)
        allowed = _field_names(spec)
        errors.extend(table.unknown_keys(allowed))
        parsed = run(parse, table, *args, **kwargs)
        if parsed is not None:
            errors.extend(table.unread_keys(allowed))
        return parsed

    auth = section("auth", AuthSpec, False, _parse_auth)
    create = section("create", CreateSpec, True, _parse_create)
    status = section("status", StatusSpec, True, _parse_status, create)
    states = section("states", StateTable, True, _parse_states, status)
    cancel = section("cancel", CancelSpec, False, _parse_cancel)
    reconciliation = section("reconciliation", ReconciliationSpec, True, _parse_reconciliation)
    result = section("result", ResultSpec, False, _parse_result, status)
    webhook = section("webhook", WebhookSpec, False, _parse_webhook)
    poll = section("poll", PollPolicy, True, _parse_poll)
    limits = section("limits", Limits, True, _parse_limits)
    if top is not None:
        run(_check_extra_headers, file, top, create, auth)
        errors.extend(root.unread_keys(top_fields))

    if (
        errors
        or top is None
        or create is None
        or status is None
        or states is None
        or reconciliation is None
        or poll is None
        or limits is None
    ):
        return None, errors
    contract = ProviderContract(
        name=top.name,
        source_file=file,
        base_url=top.base_url,
        base_url_env=top.base_url_env,
        requires_approval=top.requires_approval,
        plugin=top.plugin,
        extra_headers=top.extra_headers,
        auth=auth,
        create=create,
        status=status,
        states=states,
        cancel=cancel,
        reconciliation=reconciliation,
        result=result,
        webhook=webhook,
        poll=poll,
        limits=limits,
    )
    return contract, []


# --- sections -----------------------------------------------------------------


def _parse_top(t: _Table, stem: str) -> _TopLevel:
    name = t.required("name", t.text("name"))
    if not _NAME.match(name):
        raise t.fail("name", f"must be lower case letters, digits and '_', got {name!r}")
    if name != stem:
        raise t.fail("name", f"must equal the file name {stem!r} (without .toml), got {name!r}")
    base_url = t.required("base_url", t.url("base_url"))
    plugin = t.text("plugin")
    if plugin is not None and not is_plugin_spec(plugin):
        raise t.fail("plugin", f"must have the form 'package.module:attribute', got {plugin!r}")
    headers: dict[str, str] = {}
    raw_headers = t.get("extra_headers")
    if raw_headers is not None:
        if not isinstance(raw_headers, dict):
            raise t.fail("extra_headers", f"must be a table, got {_toml_type(raw_headers)}")
        for header, value in raw_headers.items():
            field = f"extra_headers.{header}"
            if not _HEADER_NAME.match(header):
                raise ContractError(t.file, field, "is not a valid HTTP header name")
            if any(word in header.lower() for word in _SECRET_HEADER_WORDS):
                raise ContractError(
                    t.file,
                    field,
                    "looks like a credential; secrets never go in contract files, "
                    "use [auth] with secret_env or secret_file",
                )
            if not isinstance(value, str):
                raise ContractError(t.file, field, f"must be a string, got {_toml_type(value)}")
            headers[header] = value
    return _TopLevel(
        name=name,
        base_url=base_url,
        base_url_env=t.env_name("base_url_env"),
        requires_approval=t.boolean("requires_approval", default=False),
        plugin=plugin,
        extra_headers=headers,
    )


def _check_extra_headers(
    file: str, top: _TopLevel, create: CreateSpec | None, auth: AuthSpec | None
) -> None:
    """Static headers must not replace the idempotency token or the credential."""
    reserved = {}
    if create is not None and create.token_placement is TokenPlacement.header:
        reserved[create.token_name.lower()] = "create.token_name"
    if auth is not None:
        reserved[auth.header.lower()] = "auth.header"
    for header in top.extra_headers:
        owner = reserved.get(header.lower())
        if owner is not None:
            raise ContractError(
                file, f"extra_headers.{header}", f"must not override the header named by {owner}"
            )


def _parse_auth(t: _Table) -> AuthSpec:
    scheme = t.required("scheme", t.choice("scheme", _AUTH_SCHEMES))
    header = t.header_name("header") or "Authorization"
    secret_env, secret_file = _secret_reference(t)
    return AuthSpec(scheme=scheme, header=header, secret_env=secret_env, secret_file=secret_file)


def _parse_create(t: _Table) -> CreateSpec:
    method = t.required("method", t.choice("method", _CREATE_METHODS))
    path = t.required("path", t.template("path", allowed=()))
    placement = t.required("token_placement", t.enum("token_placement", TokenPlacement))
    token_name = t.required("token_name", t.text("token_name"))
    if placement is TokenPlacement.header and not _HEADER_NAME.match(token_name):
        raise t.fail("token_name", "is not a valid HTTP header name")
    if placement is TokenPlacement.body and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_name):
        raise t.fail("token_name", "must be a JSON field name (letters, digits and '_')")
    locator = t.required("job_locator", t.enum("job_locator", JobLocator))
    job_id_pointer = t.pointer("job_id_pointer")
    if locator is JobLocator.body and not job_id_pointer:
        raise t.fail("job_id_pointer", "required when create.job_locator = 'body'")
    conflict = t.status_code("conflict_status", low=400, high=499)
    body_template = t.choice("body_template", _BODY_TEMPLATES) or "command"
    return CreateSpec(
        method=method,
        path=path,
        token_placement=placement,
        token_name=token_name,
        job_locator=locator,
        job_id_pointer=job_id_pointer,
        accepted_statuses=t.status_codes("accepted_statuses", default=(200, 201, 202)),
        conflict_status=conflict,
        body_template=body_template,
    )


def _parse_status(t: _Table, create: CreateSpec | None) -> StatusSpec:
    method = t.required("method", t.choice("method", _STATUS_METHODS))
    path = t.template("path", allowed=("job_id",), needed=("job_id",))
    if create is not None:
        locator = create.job_locator
        if locator is JobLocator.body and path is None:
            raise t.fail("path", "required when create.job_locator = 'body'")
        if locator is not JobLocator.body and path is not None:
            raise t.fail(
                "path",
                f"must be absent when create.job_locator = '{locator}': "
                "the status URL comes from the response header",
            )
    error_pointer = t.pointer("error_pointer")
    if error_pointer == "":
        raise t.fail("error_pointer", "must not be empty: every status body would mean failed")
    return StatusSpec(
        method=method,
        path=path,
        state_pointer=t.required("state_pointer", t.pointer("state_pointer")),
        state_default=t.text("state_default"),
        progress_pointer=t.pointer("progress_pointer"),
        poll_hint_pointer=t.pointer("poll_hint_pointer"),
        expiry_pointer=t.pointer("expiry_pointer"),
        result_ref_pointer=t.pointer("result_ref_pointer"),
        error_pointer=error_pointer,
        not_found_grace_seconds=t.seconds("not_found_grace_seconds", default=0.0, zero_ok=True),
    )


def _parse_states(t: _Table, status: StatusSpec | None) -> StateTable:
    # Order matters only for the message: a duplicate is reported on its later class.
    classes = ("pending", "cancelling", "succeeded", "failed", "cancelled", "expired")
    required_non_empty = {"pending", "succeeded", "failed"}
    # AIP-151 has no failed state value: `done` is true and `error` is set.
    if status is not None and status.error_pointer:
        required_non_empty.discard("failed")
    values: dict[str, frozenset[str]] = {}
    seen: dict[str, str] = {}
    for cls in classes:
        raw = t.str_list(cls)
        if raw is None and cls in ("pending", "succeeded", "failed"):
            raise t.fail(cls, "required")
        raw = raw or ()
        if not raw and cls in required_non_empty:
            hint = " (or set status.error_pointer)" if cls == "failed" else ""
            raise t.fail(cls, f"must list at least one state value{hint}")
        for value in raw:
            if value in seen:
                raise t.fail(
                    cls,
                    f"{value!r} is already listed in states.{seen[value]}; "
                    "a state value belongs to exactly one class",
                )
            seen[value] = cls
        values[cls] = frozenset(raw)
    # AIP-151 omits `done` until the operation finishes; the default must be a known state.
    default = status.state_default if status is not None else None
    if default is not None and not any(default in v for v in values.values()):
        raise ContractError(
            t.file, "status.state_default", f"{default!r} is not listed in any class of [states]"
        )
    return StateTable(
        pending=values["pending"],
        cancelling=values["cancelling"],
        succeeded=values["succeeded"],
        failed=values["failed"],
        cancelled=values["cancelled"],
        expired=values["expired"],
    )


def _parse_cancel(t: _Table) -> CancelSpec:
    return CancelSpec(
        method=t.required("method", t.choice("method", _CANCEL_METHODS)),
        path=t.required("path", t.template("path", allowed=("job_id",), needed=("job_id",))),
        accepted_statuses=t.status_codes("accepted_statuses", default=(200, 202, 204)),
    )


def _parse_reconciliation(t: _Table) -> ReconciliationSpec:
    kind = t.required("path", t.enum("path", ReconciliationPath))
    lookup_path = t.template("lookup_path", allowed=("token",), needed=("token",))
    lookup_pointer = t.pointer("lookup_job_id_pointer")
    if kind is ReconciliationPath.lookup_by_reference:
        if lookup_path is None:
            raise t.fail("lookup_path", "required when reconciliation.path = 'lookup_by_reference'")
        if not lookup_pointer:
            raise t.fail(
                "lookup_job_id_pointer", "required when reconciliation.path = 'lookup_by_reference'"
            )
    else:
        for key, value in (("lookup_path", lookup_path), ("lookup_job_id_pointer", lookup_pointer)):
            if value is not None:
                raise t.fail(key, "only allowed when reconciliation.path = 'lookup_by_reference'")
    return ReconciliationSpec(
        path=kind, lookup_path=lookup_path, lookup_job_id_pointer=lookup_pointer
    )


def _parse_result(t: _Table, status: StatusSpec | None) -> ResultSpec:
    fetch = t.required("fetch", t.choice("fetch", _RESULT_FETCHES))
    path = t.template("path", allowed=("job_id", "result_ref"))
    if fetch == "path" and path is None:
        raise t.fail("path", "required when result.fetch = 'path'")
    if fetch != "path" and path is not None:
        raise t.fail("path", "only allowed when result.fetch = 'path'")
    needs_ref = fetch in ("url", "inline") or (path is not None and "{result_ref}" in path)
    if needs_ref and status is not None and not status.result_ref_pointer:
        raise ContractError(
            t.file,
            "status.result_ref_pointer",
            f"required when result.fetch = '{fetch}'"
            + (" and result.path uses {result_ref}" if fetch == "path" else ""),
        )
    origins = t.str_list("allowed_origins") or ()
    for index, origin in enumerate(origins):
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.path
            or parts.query
            or parts.fragment
            or parts.username
        ):
            raise t.fail(
                f"allowed_origins[{index}]",
                f"must be an origin such as 'https://files.example.com', got {origin!r}",
            )
    # TOML has no null: an empty content_type means "do not check the content type".
    content_type = t.get("content_type")
    if content_type is None:
        content_type = "application/json"
    if not isinstance(content_type, str):
        raise t.fail("content_type", f"must be a string, got {_toml_type(content_type)}")
    checksum_header = t.header_name("checksum_header")
    return ResultSpec(
        fetch=fetch,
        path=path,
        allowed_origins=tuple(origins),
        content_type=content_type or None,
        checksum_pointer=t.pointer("checksum_pointer"),
        checksum_header=checksum_header,
        record_count_pointer=t.pointer("record_count_pointer"),
        items_pointer=t.pointer("items_pointer"),
        failed_items_pointer=t.pointer("failed_items_pointer"),
        max_bytes=t.count("max_bytes", default=50 * 1024 * 1024, maximum=MAX_RESULT_BYTES),
        max_failed_fraction=t.fraction("max_failed_fraction", default=1.0),
        jsonl=t.boolean("jsonl", default=False),
    )


def _parse_webhook(t: _Table) -> WebhookSpec:
    signature_header = t.required("signature_header", t.header_name("signature_header"))
    timestamp_header = t.required("timestamp_header", t.header_name("timestamp_header"))
    event_id_pointer = t.required("event_id_pointer", t.pointer("event_id_pointer"))
    job_id_pointer = t.required("job_id_pointer", t.pointer("job_id_pointer"))
    secret_env, secret_file = _secret_reference(t)
    return WebhookSpec(
        signature_header=signature_header,
        timestamp_header=timestamp_header,
        event_id_pointer=event_id_pointer,
        job_id_pointer=job_id_pointer,
        secret_env=secret_env,
        secret_file=secret_file,
        tolerance_seconds=t.seconds("tolerance_seconds", default=300.0, maximum=24 * 3600),
    )


def _parse_poll(t: _Table) -> PollPolicy:
    def need(key: str, *, zero_ok: bool = False) -> float:
        return t.required(key, t.seconds(key, zero_ok=zero_ok))

    initial = need("initial_delay_seconds", zero_ok=True)
    base = need("base_seconds")
    maximum = need("max_seconds")
    if base > maximum:
        raise t.fail(
            "base_seconds", f"must not exceed poll.max_seconds ({maximum:g}), got {base:g}"
        )
    jitter_floor = t.required("jitter_floor", t.fraction("jitter_floor"))
    hint_floor = need("hint_floor_seconds", zero_ok=True)
    hint_cap = need("hint_cap_seconds")
    if hint_floor > hint_cap:
        raise t.fail(
            "hint_floor_seconds",
            f"must not exceed poll.hint_cap_seconds ({hint_cap:g}), got {hint_floor:g}",
        )
    return PollPolicy(
        initial_delay_seconds=initial,
        base_seconds=base,
        max_seconds=maximum,
        jitter_floor=jitter_floor,
        hint_floor_seconds=hint_floor,
        hint_cap_seconds=hint_cap,
        rate_limit_base_seconds=need("rate_limit_base_seconds"),
        max_rate_limited=t.required("max_rate_limited", t.count("max_rate_limited")),
    )


def _parse_limits(t: _Table) -> Limits:
    def need_seconds(key: str) -> float:
        return t.required(key, t.seconds(key))

    def need_count(key: str) -> int:
        return t.required(key, t.count(key))

    create_deadline = need_seconds("create_deadline_seconds")
    timeout = t.required(
        "request_timeout_seconds",
        t.seconds("request_timeout_seconds", maximum=MAX_REQUEST_TIMEOUT_SECONDS),
    )
    # One request must fit in the create deadline, or the first create can never finish in time.
    if timeout > create_deadline:
        raise t.fail(
            "request_timeout_seconds",
            f"must not exceed limits.create_deadline_seconds ({create_deadline:g}), "
            f"got {timeout:g}",
        )
    return Limits(
        create_deadline_seconds=create_deadline,
        result_deadline_seconds=need_seconds("result_deadline_seconds"),
        cancel_deadline_seconds=need_seconds("cancel_deadline_seconds"),
        max_status_requests=need_count("max_status_requests"),
        max_transport_failures=need_count("max_transport_failures"),
        request_timeout_seconds=timeout,
        max_create_attempts=t.count("max_create_attempts", default=5, maximum=100),
    )


def _secret_reference(t: _Table) -> tuple[str | None, str | None]:
    """Exactly one of secret_env / secret_file, each a reference, never the secret."""
    secret_env = t.env_name("secret_env")
    secret_file = t.text("secret_file")
    if secret_file is not None and not secret_file.startswith("/"):
        raise t.fail("secret_file", "must be an absolute path")
    if (secret_env is None) == (secret_file is None):
        raise t.fail("secret_env", "exactly one of secret_env and secret_file is required")
    return secret_env, secret_file


# --- field readers ------------------------------------------------------------


class _Table:
    """One TOML table and its dotted prefix; each reader raises ContractError on a bad value.

    Readers return None for an absent key (TOML has no null, so absent is the
    only way to say "none"); ``required`` turns that into an error.
    """

    __slots__ = ("data", "file", "prefix", "read")

    def __init__(self, file: str, prefix: str, data: Mapping[str, object]) -> None:
        self.file = file
        self.prefix = prefix
        self.data = data
        self.read: set[str] = set()

    def get(self, key: str) -> object:
        self.read.add(key)
        return self.data.get(key)

    def unread_keys(self, allowed: Iterable[str]) -> list[ContractError]:
        """Allowed keys present in the file that no reader consumed.

        Guards the loader against a field added to models.contract but not
        parsed here: it must fail loudly rather than drop the value.
        """
        return [
            self.fail(key, "is a contract field this loader does not read yet")
            for key in self.data
            if key in allowed and key not in self.read
        ]

    def fail(self, key: str, problem: str) -> ContractError:
        return ContractError(self.file, f"{self.prefix}.{key}" if self.prefix else key, problem)

    def unknown_keys(self, allowed: Iterable[str]) -> list[ContractError]:
        allowed = sorted(allowed)
        errors = []
        for key in self.data:
            if key.lower().replace("-", "_") in _SECRET_KEYS:
                errors.append(
                    self.fail(
                        key,
                        "looks like a literal secret; secrets never go in contract files, "
                        "name an environment variable with secret_env "
                        "or a file with secret_file instead",
                    )
                )
            elif key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                errors.append(self.fail(key, f"unknown field{hint}"))
        return errors

    def required(self, key: str, value: _T | None) -> _T:
        if value is None:
            raise self.fail(key, "required")
        return value

    def _typed(self, key: str, cls: type[_T], what: str) -> _T | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, cls):
            raise self.fail(key, f"must be {what}, got {_toml_type(value)}")
        return value

    def text(self, key: str) -> str | None:
        value = self._typed(key, str, "a string")
        if value is not None and not value.strip():
            raise self.fail(key, "must not be empty")
        return value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._typed(key, bool, "true or false")
        return default if value is None else value

    def choice(self, key: str, options: tuple[str, ...]) -> str | None:
        value = self._typed(key, str, "a string")
        if value is not None and value not in options:
            raise self.fail(key, f"must be one of: {', '.join(options)}; got {value!r}")
        return value

    def enum(self, key: str, enum: type[_E]) -> _E | None:
        value = self.choice(key, tuple(member.value for member in enum))
        return None if value is None else enum(value)

    def url(self, key: str) -> str | None:
        value = self.text(key)
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.username or parts.password:
            # Do not echo the value: it carries a credential.
            raise self.fail(key, "must not carry credentials; use [auth] with secret_env")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.fail(key, f"must be an absolute http(s) URL, got {value!r}")
        if parts.query or parts.fragment:
            raise self.fail(key, "must not have a query or fragment")
        if value.endswith("/"):
            raise self.fail(key, "must not end with '/' (every path starts with '/')")
        return value

    def env_name(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None and not _ENV_NAME.match(value):
            # Not echoed: a value that is not a variable name may be the secret itself.
            raise self.fail(
                key,
                "must name an environment variable (upper case letters, digits and '_', "
                "e.g. JOBWARDEN_SANDBOX_TOKEN), not hold a value",
            )
        return value

    def header_name(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None and not _HEADER_NAME.match(value):
            raise self.fail(key, f"is not a valid HTTP header name: {value!r}")
        return value

    def pointer(self, key: str) -> str | None:
        value = self._typed(key, str, "a string")
        if value is not None and value and not value.startswith("/"):
            raise self.fail(
                key, f"must be a JSON pointer: empty or starting with '/', got {value!r}"
            )
        return value

    def template(
        self, key: str, *, allowed: tuple[str, ...], needed: tuple[str, ...] = ()
    ) -> str | None:
        value = self.text(key)
        if value is None:
            return None
        if not value.startswith("/"):
            raise self.fail(key, f"must start with '/' (it is relative to base_url), got {value!r}")
        if any(ch.isspace() for ch in value):
            raise self.fail(key, "must not contain whitespace")
        names = _PLACEHOLDER.findall(value)
        for name in names:
            if name not in allowed:
                allowed_text = ", ".join(f"{{{a}}}" for a in allowed) or "none"
                raise self.fail(key, f"unknown placeholder {{{name}}}; allowed: {allowed_text}")
        if "{" in _PLACEHOLDER.sub("", value) or "}" in _PLACEHOLDER.sub("", value):
            raise self.fail(key, "has an unbalanced '{' or '}'")
        for name in needed:
            if name not in names:
                raise self.fail(key, f"must contain {{{name}}}")
        return value

    def _number(self, key: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {_toml_type(value)}")
        if not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {value}")
        return value

    @overload
    def seconds(
        self, key: str, *, default: float, zero_ok: bool = ..., maximum: float = ...
    ) -> float: ...
    @overload
    def seconds(
        self, key: str, *, default: None = ..., zero_ok: bool = ..., maximum: float = ...
    ) -> float | None: ...
    def seconds(
        self,
        key: str,
        *,
        default: float | None = None,
        zero_ok: bool = False,
        maximum: float = MAX_SECONDS,
    ) -> float | None:
        value = self._number(key)
        if value is None:
            return default
        if zero_ok and value < 0:
            raise self.fail(key, f"must be zero or a positive number, got {value:g}")
        if not zero_ok and value <= 0:
            raise self.fail(key, f"must be a positive number, got {value:g}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum:g} seconds, got {value:g}")
        return float(value)

    @overload
    def fraction(self, key: str, *, default: float) -> float: ...
    @overload
    def fraction(self, key: str, *, default: None = ...) -> float | None: ...
    def fraction(self, key: str, *, default: float | None = None) -> float | None:
        value = self._number(key)
        if value is None:
            return default
        if not 0 <= value <= 1:
            raise self.fail(key, f"must be between 0 and 1, got {value:g}")
        return float(value)

    @overload
    def count(self, key: str, *, default: int, maximum: int = ...) -> int: ...
    @overload
    def count(self, key: str, *, default: None = ..., maximum: int = ...) -> int | None: ...
    def count(
        self, key: str, *, default: int | None = None, maximum: int = MAX_COUNT
    ) -> int | None:
        value = self._number(key)
        if value is None:
            return default
        if not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {value:g}")
        if value < 1:
            raise self.fail(key, f"must be a positive whole number, got {value}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum}, got {value}")
        return value

    def status_code(self, key: str, *, low: int, high: int) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"must be an HTTP status code from {low} to {high}, got {value!r}")
        return value

    def status_codes(self, key: str, *, default: tuple[int, ...]) -> tuple[int, ...]:
        value = self._typed(key, list, "an array of HTTP status codes")
        if value is None:
            return default
        if not value:
            raise self.fail(key, "must list at least one status code")
        codes = []
        for index, code in enumerate(value):
            if isinstance(code, bool) or not isinstance(code, int) or not 200 <= code <= 299:
                raise self.fail(f"{key}[{index}]", f"must be a 2xx status code, got {code!r}")
            codes.append(code)
        return tuple(codes)

    def str_list(self, key: str) -> tuple[str, ...] | None:
        value = self._typed(key, list, "an array of strings")
        if value is None:
            return None
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(
                    f"{key}[{index}]",
                    f"must be a string, got {_toml_type(item)} "
                    '(write JSON true/false as "true"/"false")',
                )
            if not item:
                raise self.fail(f"{key}[{index}]", "must not be empty")
        return tuple(value)


def _field_names(spec: type) -> set[str]:
    return {f.name for f in fields(spec)}


def _toml_type(value: object) -> str:
    """The TOML word for a parsed value's type, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value:g})"
    if isinstance(value, str):
        return f"a string ({value!r})" if len(value) <= 40 else "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"
