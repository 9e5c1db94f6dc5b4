"""The tables of a contract file as pydantic models, each building its ``contracts.contract`` value.

One model per TOML table (``[auth]``, ``[poll]``, ...) and one for the top-level keys;
the job's own tables are in ``models.contracts.job`` (``[create]``, ``[status]``,
``[states]``) and ``models.contracts.result`` (``[result]``). This module holds what they
share: ``ContractTable``, ``default`` and the validation context's readers.

A model's fields are the TOML keys, spelt as the fields of the dataclass it builds
(``spec()``), typed with the vocabulary of ``models.contracts.fields``; unknown
keys are refused (a typo must never fall back to a default). Rules that span keys are
the model's ``after`` validator; a rule that spans tables reads the neighbour already
built from the validation context (absent when that table was missing or broken) and
names the field where the fault lies, which may be in the other table
(``status.result_ref_pointer``). ``models.contracts.loader`` validates the tables in
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

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from jobwarden.models.contracts.contract import (
    DEFAULT_GROWTH_FACTOR,
    MAX_APPROVALS_REQUIRED,
    MAX_GROWTH_FACTOR,
    MIN_GROWTH_FACTOR,
    AuthSpec,
    CancelSpec,
    ChecksumEncoding,
    CleanupSpec,
    Convention,
    CreateSpec,
    Limits,
    PollPolicy,
    ReconciliationPath,
    ReconciliationSpec,
    TokenPlacement,
    WebhookScheme,
    WebhookSpec,
)
from jobwarden.models.contracts.fields import (
    HEADER_NAME,
    MAX_REQUEST_TIMEOUT_SECONDS,
    EnvName,
    Flag,
    Fraction,
    HeaderName,
    Pointer,
    StrList,
    Text,
    Url,
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
from jobwarden.models.contracts.plugins import is_plugin_spec
from jobwarden.models.errors import ContractError
from jobwarden.models.history.excerpts import names_a_secret

__all__ = [
    "AuthTable",
    "CancelTable",
    "CleanupTable",
    "ContractTable",
    "LimitsTable",
    "PollTable",
    "ReconciliationTable",
    "TopLevel",
    "WebhookTable",
    "check_extra_headers",
    "context_of",
    "convention_of",
    "default",
]

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*\Z")


def default(spec: type, name: str) -> Any:
    """The dataclass's own default for a field: one source for the loader and the schema."""
    for f in fields(spec):
        if f.name == name:
            if f.default is not MISSING:
                return f.default
            if f.default_factory is not MISSING:
                return f.default_factory()
    raise KeyError(f"{spec.__name__}.{name} has no default")


def context_of(info: ValidationInfo) -> Mapping[str, Any]:
    return info.context or {}


def convention_of(info: ValidationInfo) -> Convention | None:
    """The file's convention; None when the top level could not say (see the module doc)."""
    convention: Convention | None = context_of(info).get("convention", Convention.plain)
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
    approvals_required: Annotated[int, count(maximum=MAX_APPROVALS_REQUIRED)] = 1
    """How many distinct people approve (2: the two-person rule; implies requires_approval)."""
    plugin: Text | None = None
    """'package.module:attribute' of a ProviderPlugin, for providers that need code."""
    extra_headers: Annotated[
        dict[str, str],
        kind(_extra_headers, {"type": "object", "additionalProperties": {"type": "string"}}),
    ] = Field(default_factory=dict)
    """Static headers sent with every request (never a credential)."""
    convention: Annotated[Convention, choice(Convention)] = Convention.plain
    """The polling strategy (models/conventions/strategies.py); 'plain' assumes nothing."""

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        if not _NAME.match(self.name):
            raise problem(
                f"must be lower case letters, digits and '_', got {self.name!r}", field="name"
            )
        stem = context_of(info).get("stem")
        if stem is not None and self.name != stem:
            raise problem(
                f"must equal the file name {stem!r} (without .toml), got {self.name!r}",
                field="name",
            )
        explicit = "requires_approval" in self.model_fields_set
        if self.approvals_required > 1 and explicit and not self.requires_approval:
            raise problem(
                f"approvals_required = {self.approvals_required} needs approval: "
                "set requires_approval = true or leave it out",
                field="requires_approval",
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


# --- [cancel], [reconciliation] -----------------------------------------------------


class CancelTable(ContractTable):
    """How a running job is cancelled."""

    builds = CancelSpec
    method: Annotated[str, choice_of("POST", "DELETE", "PUT", "PATCH")]
    path: Annotated[str, template("job_id", needed=("job_id",))]
    accepted_statuses: Annotated[tuple[int, ...], status_codes()] = default(
        CancelSpec, "accepted_statuses"
    )


# The ends after which a provider may leave resources (a job never started leaves none).
CLEANUP_ENDS: Final = ("failed", "cancelled", "expired")


class CleanupTable(ContractTable):
    """What the provider leaves when a job ends badly, and the endpoint that removes it."""

    builds = CleanupSpec
    after: StrList
    """The ends that leave resources: 'failed', 'cancelled', 'expired'."""
    method: Annotated[str, choice_of("DELETE", "POST")]
    path: Annotated[str, template("job_id", needed=("job_id",))]
    confirmed_statuses: Annotated[tuple[int, ...], status_codes()] = default(
        CleanupSpec, "confirmed_statuses"
    )
    """Answers to the call that mean the resources are gone (ARM: 200, 204)."""
    accepted_statuses: Annotated[tuple[int, ...], status_codes()] = default(
        CleanupSpec, "accepted_statuses"
    )
    """Answers that mean removal started; check_path confirms it (ARM: 202)."""
    confirmed_pointer: Pointer | None = None
    """Where a confirmed answer says it removed them (OpenAI Delete file: /deleted)."""
    confirmed_values: tuple[str | bool | int, ...] = default(CleanupSpec, "confirmed_values")
    check_path: Annotated[str | None, template("job_id", needed=("job_id",))] = None
    """A GET that answers a gone status once the resources are removed."""
    gone_statuses: Annotated[tuple[int, ...], status_codes(low=400, high=499)] = default(
        CleanupSpec, "gone_statuses"
    )
    deadline_seconds: Annotated[float, seconds()] = default(CleanupSpec, "deadline_seconds")

    @model_validator(mode="after")
    def _rules(self) -> Self:
        if not self.after:
            raise problem("must name at least one end: " + ", ".join(CLEANUP_ENDS), field="after")
        for index, end in enumerate(self.after):
            if end not in CLEANUP_ENDS:
                raise problem(
                    f"must be one of: {', '.join(CLEANUP_ENDS)}; got {end!r}",
                    field=f"after[{index}]",
                )
        both = set(self.confirmed_statuses) & set(self.accepted_statuses)
        if both:
            raise problem(
                f"{sorted(both)} cannot both confirm and only accept", field="accepted_statuses"
            )
        if not self.confirmed_values:
            raise problem("must list at least one value", field="confirmed_values")
        return self

    def spec(self) -> CleanupSpec:
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values["after"] = frozenset(self.after)
        return CleanupSpec(**values)


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
    min_status_interval_seconds: Annotated[float, seconds(zero_ok=True, maximum=3600)] = default(
        WebhookSpec, "min_status_interval_seconds"
    )
    """A webhook wakes a status read at most once per this interval per operation."""

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
    approval_window_seconds: _Positive = default(Limits, "approval_window_seconds")
    """How long an operation may wait in awaiting_approval (capped by its business deadline)."""

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
