"""The tables that say how a job is started and how its state is read: ``[create]`` (and
its ``[create.routes.<name>]``), ``[status]`` and ``[states]``.

Models as ``models.contracts.sections`` describes them; a rule here may depend on the
file's convention and on the ``[create]`` already built (context keys ``convention``
and ``create``, ``status``).
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Self

from pydantic import Field, ValidationInfo, field_validator, model_validator

from jobwarden.models.contracts.contract import (
    CreateRoute,
    CreateSpec,
    FinalStateVia,
    JobLocator,
    RemoteStatus,
    StateTable,
    StatusSpec,
    TokenPlacement,
)
from jobwarden.models.contracts.fields import (
    HEADER_NAME,
    Flag,
    HeaderName,
    Pointer,
    StrList,
    Text,
    choice,
    choice_of,
    kind,
    problem,
    seconds,
    status_codes,
    template,
    toml_type,
)
from jobwarden.models.contracts.sections import ContractTable, context_of, convention_of, default
from jobwarden.models.conventions.strategies import AZURE

__all__ = ["CreateRouteTable", "CreateTable", "StatesTable", "StatusTable"]

_ROUTE_NAME: Final = re.compile(r"[a-z][a-z0-9_-]*\Z")
_TOKEN_FIELD: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
        # (models/conventions/tables.py); a broken one supplies nothing, and then nothing
        # that depends on it is refused here either.
        convention = convention_of(info)
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
    eta_pointer: Pointer | None = None
    """The provider's estimated finish (RFC 3339 or Unix seconds)."""
    items_completed_pointer: Pointer | None = None
    """Items done so far; with items_total_pointer, progress where no percentage is given."""
    items_failed_pointer: Pointer | None = None
    """Items that failed so far: done too, as far as the job's pace is concerned."""
    items_total_pointer: Pointer | None = None
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
        create: CreateSpec | None = context_of(info).get("create")
        convention = convention_of(info)
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
        counted = self.items_completed_pointer, self.items_total_pointer
        if (counted[0] is None) != (counted[1] is None):
            raise problem(
                "items_completed_pointer and items_total_pointer go together",
                field="items_total_pointer",
            )
        if self.items_failed_pointer is not None and counted[1] is None:
            raise problem("needs items_total_pointer", field="items_failed_pointer")
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
        status: StatusSpec | None = context_of(info).get("status")
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
