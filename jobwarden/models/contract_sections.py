"""The tables of a contract file as pydantic models, each building its ``models.contract`` value.

One model per TOML table (``[create]``, ``[status]``, ...) and one for the top-level
keys. A model's fields are the TOML keys, spelt as the fields of the dataclass it
builds (``spec()``), typed with the vocabulary of ``models.contract_fields``; unknown
keys are refused (a typo must never fall back to a default). Rules that span keys are
the model's ``after`` validator; a rule that spans tables reads the neighbour already
built from the validation context (absent when that table was missing or broken) and
names the field where the fault lies, which may be in the other table
(``status.result_ref_pointer``). ``models.contract_loader`` validates the tables in
dependency order and turns pydantic's errors into ContractErrors.

The context keys: ``convention`` (None when the top level's own is broken: then no
rule that depends on it is applied, so one mistake gives one error line), ``stem``
(the file name), ``create`` and ``status`` (the built neighbours), ``directory``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, fields
from typing import Annotated, Any, ClassVar, Final, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from jobwarden.models.contract import (
    DEFAULT_GROWTH_FACTOR,
    MAX_GROWTH_FACTOR,
    MIN_GROWTH_FACTOR,
    AuthSpec,
    CancelSpec,
    ChecksumAlgorithm,
    ChecksumEncoding,
    Convention,
    CreateRoute,
    CreateSpec,
    DigestField,
    FinalStateVia,
    JobLocator,
    Limits,
    PollPolicy,
    ReconciliationPath,
    ReconciliationSpec,
    RemoteStatus,
    ResultSpec,
    StateTable,
    StatusSpec,
    TokenPlacement,
    WebhookScheme,
    WebhookSpec,
)
from jobwarden.models.contract_fields import (
    HEADER_NAME,
    MAX_REQUEST_TIMEOUT_SECONDS,
    MAX_RESULT_BYTES,
    EnvName,
    Flag,
    Fraction,
    HeaderName,
    Pointer,
    StrList,
    Text,
    Url,
    check_str_list,
    choice,
    choice_of,
    count,
    kind,
    problem,
    seconds,
    status_codes,
    template,
    toml_type,
)
from jobwarden.models.conventions import AZURE
from jobwarden.models.errors import ContractError
from jobwarden.models.excerpts import names_a_secret
from jobwarden.models.plugins import is_plugin_spec

__all__ = [
    "AuthTable",
    "CancelTable",
    "ContractTable",
    "CreateRouteTable",
    "CreateTable",
    "LimitsTable",
    "PollTable",
    "ReconciliationTable",
    "ResultTable",
    "StatesTable",
    "StatusTable",
    "TopLevel",
    "WebhookTable",
    "check_extra_headers",
]

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*\Z")
_ROUTE_NAME: Final = re.compile(r"[a-z][a-z0-9_-]*\Z")
_TOKEN_FIELD: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def default(spec: type, name: str) -> Any:
    """The dataclass's own default for a field: one source for the loader and the schema."""
    for f in fields(spec):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
    raise KeyError(f"{spec.__name__}.{name} has no default")


def _context(info: ValidationInfo) -> Mapping[str, Any]:
    return info.context or {}


def _convention(info: ValidationInfo) -> Convention | None:
    """The file's convention; None when the top level could not say (see the module doc)."""
    convention: Convention | None = _context(info).get("convention", Convention.plain)
    return convention


class ContractTable(BaseModel):
    """A contract table: its keys and nothing else; ``spec()`` builds the domain value."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)
    builds: ClassVar[type]

    def spec(self) -> Any:
        return self.builds(**{name: getattr(self, name) for name in type(self).model_fields})


# --- top level ----------------------------------------------------------------------


def _extra_headers(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise problem(f"must be a table, got {toml_type(value)}")
    for header, text in value.items():
        if not HEADER_NAME.match(header):
            raise problem("is not a valid HTTP header name", field=header)
        if names_a_secret(header):
            raise problem(
                "looks like a credential; secrets never go in contract files, "
                "use [auth] with secret_env or secret_file",
                field=header,
            )
        if not isinstance(text, str):
            raise problem(f"must be a string, got {toml_type(text)}", field=header)
    return dict(value)


class TopLevel(ContractTable):
    """The keys outside any table: who the provider is and where it answers."""

    name: Text
    """Lower case letters, digits and '_'; equal to the file name without .toml."""
    base_url: Url
    """The provider's absolute http(s) URL; every path is relative to it."""
    base_url_env: EnvName | None = None
    """An environment variable that overrides base_url when set."""
    requires_approval: Flag = False
    """Whether a human approves each operation before its create is sent."""
    plugin: Text | None = None
    """'package.module:attribute' of a ProviderPlugin, for providers that need code."""
    extra_headers: Annotated[
        dict[str, str],
        kind(_extra_headers, {"type": "object", "additionalProperties": {"type": "string"}}),
    ] = Field(default_factory=dict)
    """Static headers sent with every request (never a credential)."""
    convention: Annotated[Convention, choice(Convention)] = Convention.plain
    """The polling strategy (models/conventions.py); 'plain' assumes nothing."""

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        if not _NAME.match(self.name):
            raise problem(
                f"must be lower case letters, digits and '_', got {self.name!r}", field="name"
            )
        stem = _context(info).get("stem")
        if stem is not None and self.name != stem:
            raise problem(
                f"must equal the file name {stem!r} (without .toml), got {self.name!r}",
                field="name",
            )
        if self.plugin is not None and not is_plugin_spec(self.plugin):
            raise problem(
                f"must have the form 'package.module:attribute', got {self.plugin!r}",
                field="plugin",
            )
        return self


def check_extra_headers(
    file: str, top: TopLevel, create: CreateSpec | None, auth: AuthSpec | None
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


# --- [auth] and secrets -------------------------------------------------------------


def _secret_reference(secret_env: str | None, secret_file: str | None) -> None:
    """Exactly one of secret_env / secret_file, each a reference, never the secret."""
    if secret_file is not None and not secret_file.startswith("/"):
        raise problem("must be an absolute path", field="secret_file")
    if (secret_env is None) == (secret_file is None):
        raise problem("exactly one of secret_env and secret_file is required", field="secret_env")


class AuthTable(ContractTable):
    """How requests carry the credential."""

    builds = AuthSpec
    scheme: Annotated[str, choice_of("bearer", "header")]
    """'bearer' (Authorization: Bearer <secret>) or 'header' (the secret as the header's value)."""
    header: HeaderName = default(AuthSpec, "header")
    secret_env: EnvName | None = None
    """The environment variable holding the secret (never the secret itself)."""
    secret_file: Text | None = None
    """An absolute path of a file holding the secret."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        _secret_reference(self.secret_env, self.secret_file)
        return self


# --- [create] -----------------------------------------------------------------------

_CREATE_METHOD: Final = choice_of("POST", "PUT", "PATCH", "DELETE")
_CreatePath = Annotated[str, template(command=True)]


class CreateRouteTable(ContractTable):
    """[create.routes.<name>]: a further route of the same API."""

    builds = CreateRoute
    method: Annotated[str, _CREATE_METHOD]
    path: _CreatePath
    body_pointer: Pointer | None = None
    """Where in the command the body is ('' the whole command); a DELETE sends none."""
    final_state_via: Annotated[FinalStateVia | None, choice(FinalStateVia)] = None


class CreateTable(ContractTable):
    """The one request that starts the remote job, and what its answer means."""

    builds = CreateSpec
    method: Annotated[str, _CREATE_METHOD]
    path: _CreatePath
    token_placement: Annotated[TokenPlacement, choice(TokenPlacement)]
    token_name: Text
    """The idempotency token's header name or JSON body field."""
    job_locator: Annotated[JobLocator | None, choice(JobLocator)] = None
    """Where the answer names the job; 'convention' (the default under one) lets it decide."""
    job_id_pointer: Pointer | None = None
    accepted_statuses: Annotated[tuple[int, ...], status_codes()] = default(
        CreateSpec, "accepted_statuses"
    )
    in_flight_statuses: Annotated[tuple[int, ...], status_codes(low=400, high=499)] = default(
        CreateSpec, "in_flight_statuses"
    )
    in_flight_pointer: Pointer | None = None
    in_flight_values: StrList = ()
    body_template: Annotated[str, choice_of("command", "wrapped")] = default(
        CreateSpec, "body_template"
    )
    token_format: Annotated[str, choice_of("prefixed_hex", "uuid")] = default(
        CreateSpec, "token_format"
    )
    first_sent_header: HeaderName | None = None
    body_pointer: Pointer | None = None
    final_state_via: Annotated[FinalStateVia | None, choice(FinalStateVia)] = None
    routes: dict[str, CreateRouteTable] = Field(
        default_factory=dict, json_schema_extra={"propertyNames": {"pattern": "^[a-z][a-z0-9_-]*$"}}
    )
    """Further routes of the same API; the command's value at route_pointer picks one."""
    route_pointer: Pointer | None = None

    @field_validator("routes", mode="before")
    @classmethod
    def _route_names(cls, value: object) -> object:
        if not isinstance(value, dict):
            raise problem(f"must be a table of routes, got {toml_type(value)}")
        for name, route in value.items():
            if not _ROUTE_NAME.match(name):
                raise problem("a route name is lower case letters, digits, '_', '-'", field=name)
            if not isinstance(route, dict):
                raise problem(f"must be a table, got {toml_type(route)}", field=name)
        return value

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        if self.token_placement is TokenPlacement.header and not HEADER_NAME.match(self.token_name):
            raise problem("is not a valid HTTP header name", field="token_name")
        if self.token_placement is TokenPlacement.body and not _TOKEN_FIELD.match(self.token_name):
            raise problem("must be a JSON field name (letters, digits and '_')", field="token_name")
        # An Azure convention supplies job_locator = "convention"
        # (models/convention_tables.py); a broken one supplies nothing, and then nothing
        # that depends on it is refused here either.
        convention = _convention(info)
        azure, unknown = convention in AZURE, convention is None
        if self.job_locator is None and unknown:
            self.job_locator = JobLocator.convention
        if self.job_locator is None:
            raise problem("required", field="job_locator")
        if not unknown and (self.job_locator is JobLocator.convention) != azure:
            raise problem(
                f"'convention' is the only locator under convention = {convention}"
                if azure
                else "'convention' needs convention = 'azure-lro' or 'azure-arm' at the top level",
                field="job_locator",
            )
        if self.job_locator is JobLocator.body and not self.job_id_pointer:
            raise problem("required when create.job_locator = 'body'", field="job_id_pointer")
        if bool(self.in_flight_pointer) != bool(self.in_flight_values):
            raise problem(
                "in_flight_pointer and in_flight_values go together", field="in_flight_values"
            )
        if bool(self.routes) != (self.route_pointer is not None):
            raise problem(
                "create.route_pointer and [create.routes.*] go together", field="route_pointer"
            )
        methods = (self.method, *(route.method for route in self.routes.values()))
        if self.token_placement is TokenPlacement.body and "DELETE" in methods:
            raise problem(
                "a DELETE sends no body: the token must travel in a header", field="token_placement"
            )
        return self

    def spec(self) -> CreateSpec:
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values["routes"] = {name: route.spec() for name, route in self.routes.items()}
        return CreateSpec(**values)


# --- [status] and [states] ----------------------------------------------------------


class StatusTable(ContractTable):
    """How the job's state is read."""

    builds = StatusSpec
    method: Annotated[str, choice_of("GET", "POST")]
    path: Annotated[str | None, template("job_id", needed=("job_id",))] = None
    """The status URL with {job_id}; absent when the create answer's header names it."""
    state_pointer: Pointer | None = None
    """Where the raw state sits (an Azure convention knows its own)."""
    state_default: Text | None = None
    """The state when the field is absent (AIP-151 omits done while it is false)."""
    progress_pointer: Pointer | None = None
    started_at_pointer: Pointer | None = None
    poll_hint_pointer: Pointer | None = None
    expiry_pointer: Pointer | None = None
    result_ref_pointer: Pointer | None = None
    """Where a finished job names its result; '' is the whole status body."""
    error_pointer: Pointer | None = None
    """A value here means failed (AIP-151 error)."""
    error_code_pointer: Pointer | None = None
    detail_state_pointer: Pointer | None = None
    not_found_grace_seconds: Annotated[float, seconds(zero_ok=True)] = 0.0

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        create: CreateSpec | None = _context(info).get("create")
        convention = _convention(info)
        # A locator left to a convention that is itself broken says nothing about paths.
        if create is not None and not (
            convention is None and create.job_locator is JobLocator.convention
        ):
            locator = create.job_locator
            if locator is JobLocator.body and self.path is None:
                raise problem("required when create.job_locator = 'body'", field="path")
            if locator is not JobLocator.body and self.path is not None:
                raise problem(
                    f"must be absent when create.job_locator = '{locator}': "
                    "the status URL comes from the response header",
                    field="path",
                )
        if self.error_pointer == "":
            raise problem(
                "must not be empty: every status body would mean failed", field="error_pointer"
            )
        # Under an Azure convention the monitor decides where the state sits.
        if convention is not None and convention not in AZURE and self.state_pointer is None:
            raise problem("required", field="state_pointer")
        return self


_OUTCOMES: Final = {s.value: s for s in RemoteStatus if s is not RemoteStatus.unknown}


def _outcome_table(value: object) -> dict[str, RemoteStatus]:
    """A table of provider value -> outcome class (pending, succeeded, failed, ...)."""
    if not isinstance(value, dict):
        raise problem(f"must be a table of value = outcome, got {toml_type(value)}")
    table: dict[str, RemoteStatus] = {}
    for raw, outcome in value.items():
        if outcome not in _OUTCOMES:
            raise problem(
                f"must be one of: {', '.join(_OUTCOMES)}, got {outcome!r}", field=str(raw)
            )
        table[str(raw)] = _OUTCOMES[outcome]
    return table


_OutcomeTable = Annotated[
    dict[str, RemoteStatus],
    kind(
        _outcome_table,
        {"type": "object", "additionalProperties": {"type": "string", "enum": list(_OUTCOMES)}},
    ),
]
# Order matters only for the message: a duplicate is reported on its later class.
_CLASSES: Final = ("pending", "cancelling", "succeeded", "failed", "cancelled", "expired")


class StatesTable(ContractTable):
    """What each raw state value means."""

    builds = StateTable
    pending: StrList
    cancelling: StrList = ()
    succeeded: StrList
    failed: StrList
    cancelled: StrList = ()
    expired: StrList = ()
    error_codes: _OutcomeTable = Field(default_factory=dict)
    """A failed job's error code -> what it really is (google.rpc.Code 1 -> cancelled)."""
    detail: _OutcomeTable = Field(default_factory=dict)
    """The finer state at status.detail_state_pointer -> its outcome."""
    otherwise: Annotated[str, choice_of("pending", "unknown")] = "unknown"
    """What a state none of the lists names is."""
    case_insensitive: Flag = False

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        status: StatusSpec | None = _context(info).get("status")
        required_non_empty = {"pending", "succeeded", "failed"}
        # AIP-151 has no failed state value: `done` is true and `error` is set.
        if status is not None and status.error_pointer:
            required_non_empty.discard("failed")
        seen: dict[str, str] = {}
        for cls in _CLASSES:
            values: tuple[str, ...] = getattr(self, cls)
            if not values and cls in required_non_empty:
                hint = " (or set status.error_pointer)" if cls == "failed" else ""
                raise problem(f"must list at least one state value{hint}", field=cls)
            for value in values:
                if value in seen:
                    raise problem(
                        f"{value!r} is already listed in states.{seen[value]}; "
                        "a state value belongs to exactly one class",
                        field=cls,
                    )
                seen[value] = cls
        # AIP-151 omits `done` until the operation finishes; the default must be a known state.
        state_default = status.state_default if status is not None else None
        if state_default is not None and state_default not in seen:
            raise problem(
                f"{state_default!r} is not listed in any class of [states]",
                field="status.state_default",
                absolute=True,
            )
        if status is not None and self.error_codes and not status.error_code_pointer:
            raise problem("needs status.error_code_pointer to read the code", field="error_codes")
        if status is not None and self.detail and not status.detail_state_pointer:
            raise problem(
                "needs status.detail_state_pointer to read the finer state", field="detail"
            )
        return self

    def spec(self) -> StateTable:
        return StateTable(
            **{cls: frozenset(getattr(self, cls)) for cls in _CLASSES},
            error_codes=self.error_codes,
            detail=self.detail,
            otherwise=RemoteStatus(self.otherwise),
            case_insensitive=self.case_insensitive,
        )


# --- [cancel], [reconciliation] -----------------------------------------------------


class CancelTable(ContractTable):
    """How a running job is cancelled."""

    builds = CancelSpec
    method: Annotated[str, choice_of("POST", "DELETE", "PUT", "PATCH")]
    path: Annotated[str, template("job_id", needed=("job_id",))]
    accepted_statuses: Annotated[tuple[int, ...], status_codes()] = default(
        CancelSpec, "accepted_statuses"
    )


class ReconciliationTable(ContractTable):
    """How an ambiguous create is resolved without a second job."""

    builds = ReconciliationSpec
    path: Annotated[ReconciliationPath, choice(ReconciliationPath)]
    lookup_path: Annotated[str | None, template("token", needed=("token",))] = None
    lookup_job_id_pointer: Pointer | None = None

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.path is ReconciliationPath.lookup_by_reference:
            if self.lookup_path is None:
                raise problem(
                    "required when reconciliation.path = 'lookup_by_reference'",
                    field="lookup_path",
                )
            if not self.lookup_job_id_pointer:
                raise problem(
                    "required when reconciliation.path = 'lookup_by_reference'",
                    field="lookup_job_id_pointer",
                )
            return self
        for key in ("lookup_path", "lookup_job_id_pointer"):
            if getattr(self, key) is not None:
                raise problem(
                    "only allowed when reconciliation.path = 'lookup_by_reference'", field=key
                )
        return self


# --- [result] -----------------------------------------------------------------------


def _origins(value: object) -> tuple[str, ...]:
    origins = check_str_list(value)
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
            raise problem(
                f"must be an origin such as 'https://files.example.com', got {origin!r}",
                field=f"[{index}]",
            )
    return origins


def _digest_fields(value: object) -> tuple[DigestField, ...]:
    names = check_str_list(value)
    if not names:
        raise problem("must list at least one digest field (or be left out)")
    known = {f.value for f in DigestField}
    found: list[DigestField] = []
    for index, name in enumerate(names):
        if name not in known:
            raise problem(f"must be one of: {', '.join(known)}; got {name!r}", field=f"[{index}]")
        if DigestField(name) in found:
            raise problem(f"{name!r} is listed twice", field=f"[{index}]")
        found.append(DigestField(name))
    return tuple(found)


def _content_type(value: object) -> str | None:
    # TOML has no null: an empty content_type means "do not check the content type".
    if not isinstance(value, str):
        raise problem(f"must be a string, got {toml_type(value)}")
    return value or None


class ResultTable(ContractTable):
    """How a finished job's result is collected and checked."""

    builds = ResultSpec
    fetch: Annotated[str, choice_of("url", "inline", "path")]
    """'url' (GET the reference), 'inline' (the status body holds it), 'path' (a template)."""
    path: Annotated[str | None, template("job_id", "result_ref")] = None
    allowed_origins: Annotated[
        tuple[str, ...],
        kind(_origins, {"type": "array", "items": {"type": "string", "format": "uri"}}),
    ] = ()
    """Origins a result URL may point at besides base_url's."""
    content_type: Annotated[str | None, kind(_content_type, {"type": "string"})] = default(
        ResultSpec, "content_type"
    )
    """The result's media type; '' does not check it."""
    digests: Annotated[
        tuple[DigestField, ...],
        kind(
            _digest_fields,
            {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "enum": [f.value for f in DigestField]},
            },
        ),
    ] = ()
    """Digest fields of the result response that must verify (any present one is checked)."""
    digests_required: Flag | None = None
    checksum_pointer: Pointer | None = None
    checksum_algorithm: Annotated[ChecksumAlgorithm | None, choice(ChecksumAlgorithm)] = None
    checksum_encoding: Annotated[ChecksumEncoding | None, choice(ChecksumEncoding)] = None
    record_count_pointer: Pointer | None = None
    items_pointer: Pointer | None = None
    failed_items_pointer: Pointer | None = None
    item_status_pointer: Pointer | None = None
    item_failed_values: StrList = ()
    item_succeeded_values: StrList = ()
    item_error_pointer: Pointer | None = None
    item_status_code_pointer: Pointer | None = None
    item_ref_pointer: Pointer | None = None
    completed_count_pointer: Pointer | None = None
    failed_count_pointer: Pointer | None = None
    total_count_pointer: Pointer | None = None
    error_file_pointer: Pointer | None = None
    max_bytes: Annotated[int, count(maximum=MAX_RESULT_BYTES)] = default(ResultSpec, "max_bytes")
    max_failed_fraction: Fraction = default(ResultSpec, "max_failed_fraction")
    jsonl: Flag = False
    """One JSON value per line (OpenAI batch output) rather than one document."""

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        if self.fetch == "path" and self.path is None:
            raise problem("required when result.fetch = 'path'", field="path")
        if self.fetch != "path" and self.path is not None:
            raise problem("only allowed when result.fetch = 'path'", field="path")
        self._result_reference(info)
        if self.jsonl and self.items_pointer is not None:
            raise problem(
                "not allowed with jsonl = true: every line is an item", field="items_pointer"
            )
        if self.digests and self.fetch == "inline":
            raise problem("needs a result response; fetch = 'inline' has none", field="digests")
        if self.digests_required is not None and not self.digests:
            raise problem("only allowed with result.digests", field="digests_required")
        for key in ("checksum_algorithm", "checksum_encoding"):
            if getattr(self, key) is not None and self.checksum_pointer is None:
                raise problem("only allowed with result.checksum_pointer", field=key)
        self._item_rules()
        return self

    def _result_reference(self, info: ValidationInfo) -> None:
        status: StatusSpec | None = _context(info).get("status")
        convention = _convention(info)
        needs_ref = self.fetch in ("url", "inline") or (
            self.path is not None and "{result_ref}" in self.path
        )
        # "" is a pointer too: the whole status body is the result (RFC 6901 section 5).
        # An Azure convention finds a url result itself: the monitor's resourceLocation,
        # the Location, the original URI or the final answer (models/conventions.py).
        if (convention is None or convention in AZURE) and self.fetch == "url":
            needs_ref = False
        if needs_ref and status is not None and status.result_ref_pointer is None:
            raise problem(
                f"required when result.fetch = '{self.fetch}'"
                + (" and result.path uses {result_ref}" if self.fetch == "path" else ""),
                field="status.result_ref_pointer",
                absolute=True,
            )

    def _item_rules(self) -> None:
        """How each item's outcome is read, and the counts the status body declares."""
        if bool(self.item_status_pointer) != bool(self.item_failed_values):
            raise problem(
                "item_status_pointer and item_failed_values go together",
                field="item_failed_values",
            )
        if self.item_succeeded_values and not self.item_status_pointer:
            raise problem(
                "only allowed with result.item_status_pointer", field="item_succeeded_values"
            )
        overlap = sorted(set(self.item_failed_values) & set(self.item_succeeded_values))
        if overlap:
            raise problem(
                f"{overlap[0]!r} is also an item_failed_values", field="item_succeeded_values"
            )
        if self.error_file_pointer is not None and self.failed_count_pointer is None:
            # The failed lines are elsewhere: only the declared count says how many there are.
            raise problem("needs result.failed_count_pointer", field="error_file_pointer")

    def spec(self) -> ResultSpec:
        values = {name: getattr(self, name) for name in type(self).model_fields}
        for key in ("digests_required", "checksum_algorithm", "checksum_encoding"):
            if values[key] is None:
                values[key] = default(ResultSpec, key)
        return ResultSpec(**values)


# --- [webhook] ----------------------------------------------------------------------

_HMAC_ONLY: Final = (
    "signature_header",
    "timestamp_header",
    "event_id_pointer",
    "signature_encoding",
)


class WebhookTable(ContractTable):
    """How the provider's signed deliveries are checked and matched to a job."""

    builds = WebhookSpec
    scheme: Annotated[WebhookScheme, choice(WebhookScheme)] = WebhookScheme.hmac
    """'standard' (Standard Webhooks 1.0) or 'hmac' (headers the contract names)."""
    signature_header: HeaderName | None = None
    timestamp_header: HeaderName | None = None
    event_id_pointer: Pointer | None = None
    signature_encoding: Annotated[ChecksumEncoding | None, choice(ChecksumEncoding)] = None
    job_id_pointer: Pointer
    """Where in the body the remote job's id is."""
    secret_env: EnvName | None = None
    secret_file: Text | None = None
    tolerance_seconds: Annotated[float, seconds(maximum=24 * 3600)] = default(
        WebhookSpec, "tolerance_seconds"
    )

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.scheme is WebhookScheme.hmac:
            for key in _HMAC_ONLY[:3]:
                if getattr(self, key) is None:
                    raise problem("required", field=key)
        else:
            for key in _HMAC_ONLY:
                if getattr(self, key) is not None:
                    raise problem(
                        "only allowed with webhook.scheme = 'hmac': Standard Webhooks fixes the "
                        "headers (webhook-id, webhook-timestamp, webhook-signature) and the "
                        "encoding",
                        field=key,
                    )
        _secret_reference(self.secret_env, self.secret_file)
        return self

    def spec(self) -> WebhookSpec:
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values["signature_encoding"] = self.signature_encoding or ChecksumEncoding.hex
        return WebhookSpec(**values)


# --- [poll], [limits] ---------------------------------------------------------------


def _growth_factor(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise problem(f"must be a number, got {toml_type(value)}")
    # Also refuses nan and inf: neither compares inside the bounds.
    if not MIN_GROWTH_FACTOR <= value <= MAX_GROWTH_FACTOR:
        raise problem(
            f"must be between {MIN_GROWTH_FACTOR:g} and {MAX_GROWTH_FACTOR:g}, got {value:g}"
        )
    return float(value)


_Positive = Annotated[float, seconds()]
_ZeroOrPositive = Annotated[float, seconds(zero_ok=True)]


class PollTable(ContractTable):
    """When the status is read: backoff, jitter, and how provider hints are honoured."""

    builds = PollPolicy
    initial_delay_seconds: _ZeroOrPositive
    base_seconds: _Positive
    max_seconds: _Positive
    jitter_floor: Fraction
    """The lower bound of the random factor in [jitter_floor, 1]."""
    hint_floor_seconds: _ZeroOrPositive
    """Provider hints and Retry-After shorter than this are raised to it."""
    hint_cap_seconds: _Positive
    rate_limit_base_seconds: _Positive
    """A 429 without Retry-After: backoff starts here."""
    max_rate_limited: Annotated[int, count()]
    growth_factor: Annotated[
        float,
        kind(
            _growth_factor,
            {"type": "number", "minimum": MIN_GROWTH_FACTOR, "maximum": MAX_GROWTH_FACTOR},
        ),
    ] = DEFAULT_GROWTH_FACTOR
    """The backoff's growth per pending answer."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if self.base_seconds > self.max_seconds:
            raise problem(
                f"must not exceed poll.max_seconds ({self.max_seconds:g}), "
                f"got {self.base_seconds:g}",
                field="base_seconds",
            )
        if self.hint_floor_seconds > self.hint_cap_seconds:
            raise problem(
                f"must not exceed poll.hint_cap_seconds ({self.hint_cap_seconds:g}), "
                f"got {self.hint_floor_seconds:g}",
                field="hint_floor_seconds",
            )
        return self


class LimitsTable(ContractTable):
    """The bounds of every operation: deadlines and request budgets."""

    builds = Limits
    create_deadline_seconds: _Positive
    result_deadline_seconds: _Positive
    cancel_deadline_seconds: _Positive
    max_status_requests: Annotated[int, count()]
    max_transport_failures: Annotated[int, count()]
    request_timeout_seconds: Annotated[float, seconds(maximum=MAX_REQUEST_TIMEOUT_SECONDS)]
    max_create_attempts: Annotated[int, count(maximum=100)] = default(Limits, "max_create_attempts")
    max_result_fetches: Annotated[int, count(maximum=100)] = default(Limits, "max_result_fetches")
    result_fetch_deadline_seconds: _Positive = default(Limits, "result_fetch_deadline_seconds")

    @model_validator(mode="after")
    def _rules(self) -> Self:
        # One request must fit in the create deadline, or the first create can never finish.
        if self.request_timeout_seconds > self.create_deadline_seconds:
            raise problem(
                f"must not exceed limits.create_deadline_seconds "
                f"({self.create_deadline_seconds:g}), got {self.request_timeout_seconds:g}",
                field="request_timeout_seconds",
            )
        return self
