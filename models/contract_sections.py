"""Build each table of a contract file into its ``models.contract`` value.

One builder per TOML table (``[create]``, ``[status]``, ...) and one for the
top-level keys. Each raises ContractError at its table's first problem. A
check that spans tables takes the neighbour already built (``None`` when that
table was missing or broken) and names the field where the fault lies, which
may be in the other table (``status.result_ref_pointer``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, TypedDict
from urllib.parse import urlsplit

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
    TomlTable,
    toml_type,
)
from jobwarden.models.errors import ContractError
from jobwarden.models.excerpts import names_a_secret
from jobwarden.models.plugins import is_plugin_spec

__all__ = [
    "TopLevel",
    "check_extra_headers",
    "parse_auth",
    "parse_cancel",
    "parse_create",
    "parse_limits",
    "parse_poll",
    "parse_reconciliation",
    "parse_result",
    "parse_states",
    "parse_status",
    "parse_top",
    "parse_webhook",
]

_NAME: Final = re.compile(r"[a-z][a-z0-9_]*\Z")

_CREATE_METHODS: Final = ("POST", "PUT", "PATCH", "DELETE")
_ROUTE_NAME: Final = re.compile(r"[a-z][a-z0-9_-]*\Z")
# The conventions whose strategy locates the job and reads the state (models/conventions.py).
_AZURE: Final = (Convention.azure_lro, Convention.azure_arm)
_STATUS_METHODS: Final = ("GET", "POST")
_CANCEL_METHODS: Final = ("POST", "DELETE", "PUT", "PATCH")
_RESULT_FETCHES: Final = ("url", "inline", "path")
_BODY_TEMPLATES: Final = ("command", "wrapped")
_AUTH_SCHEMES: Final = ("bearer", "header")


@dataclass(frozen=True, slots=True, kw_only=True)
class TopLevel:
    name: str
    base_url: str
    base_url_env: str | None
    requires_approval: bool
    plugin: str | None
    extra_headers: dict[str, str]
    convention: Convention = Convention.plain


def parse_top(t: TomlTable, stem: str) -> TopLevel:
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
            raise t.fail("extra_headers", f"must be a table, got {toml_type(raw_headers)}")
        for header, value in raw_headers.items():
            field = f"extra_headers.{header}"
            if not HEADER_NAME.match(header):
                raise ContractError(t.file, field, "is not a valid HTTP header name")
            if names_a_secret(header):
                raise ContractError(
                    t.file,
                    field,
                    "looks like a credential; secrets never go in contract files, "
                    "use [auth] with secret_env or secret_file",
                )
            if not isinstance(value, str):
                raise ContractError(t.file, field, f"must be a string, got {toml_type(value)}")
            headers[header] = value
    return TopLevel(
        name=name,
        base_url=base_url,
        base_url_env=t.env_name("base_url_env"),
        requires_approval=t.boolean("requires_approval", default=False),
        plugin=plugin,
        extra_headers=headers,
        convention=t.enum("convention", Convention) or Convention.plain,
    )


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


def parse_auth(t: TomlTable) -> AuthSpec:
    scheme = t.required("scheme", t.choice("scheme", _AUTH_SCHEMES))
    header = t.header_name("header") or "Authorization"
    secret_env, secret_file = _secret_reference(t)
    return AuthSpec(scheme=scheme, header=header, secret_env=secret_env, secret_file=secret_file)


def parse_create(t: TomlTable, convention: Convention | None = None) -> CreateSpec:
    method = t.required("method", t.choice("method", _CREATE_METHODS))
    path = t.required("path", t.template("path", allowed=(), command=True))
    placement = t.required("token_placement", t.enum("token_placement", TokenPlacement))
    token_name = t.required("token_name", t.text("token_name"))
    if placement is TokenPlacement.header and not HEADER_NAME.match(token_name):
        raise t.fail("token_name", "is not a valid HTTP header name")
    if placement is TokenPlacement.body and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token_name):
        raise t.fail("token_name", "must be a JSON field name (letters, digits and '_')")
    # None: the top level's convention is itself broken (reported there), so nothing that
    # depends on it is required or refused here: one mistake, one error line.
    azure, unknown = convention in _AZURE, convention is None
    locator = t.enum("job_locator", JobLocator)
    if locator is None and (azure or unknown):
        locator = JobLocator.convention
    locator = t.required("job_locator", locator)
    if not unknown and (locator is JobLocator.convention) != azure:
        raise t.fail(
            "job_locator",
            f"'convention' is the only locator under convention = {convention}"
            if azure
            else "'convention' needs convention = 'azure-lro' or 'azure-arm' at the top level",
        )
    job_id_pointer = t.pointer("job_id_pointer")
    if locator is JobLocator.body and not job_id_pointer:
        raise t.fail("job_id_pointer", "required when create.job_locator = 'body'")
    in_flight = t.status_codes("in_flight_statuses", default=(409,), low=400, high=499)
    in_flight_pointer = t.pointer("in_flight_pointer")
    in_flight_values = t.str_list("in_flight_values") or ()
    if bool(in_flight_pointer) != bool(in_flight_values):
        raise t.fail("in_flight_values", "in_flight_pointer and in_flight_values go together")
    accepted = t.status_codes("accepted_statuses", default=(200, 201, 202))
    body_template = t.choice("body_template", _BODY_TEMPLATES) or "command"
    token_format = t.choice("token_format", ("prefixed_hex", "uuid")) or "prefixed_hex"
    first_sent_header = t.header_name("first_sent_header")
    routes = _routes(t)
    route_pointer = t.pointer("route_pointer")
    if bool(routes) != (route_pointer is not None):
        raise t.fail("route_pointer", "create.route_pointer and [create.routes.*] go together")
    if placement is TokenPlacement.body and "DELETE" in (
        method,
        *(r.method for r in routes.values()),
    ):
        raise t.fail("token_placement", "a DELETE sends no body: the token must travel in a header")
    return CreateSpec(
        method=method,
        path=path,
        token_placement=placement,
        token_name=token_name,
        job_locator=locator,
        job_id_pointer=job_id_pointer,
        accepted_statuses=accepted,
        in_flight_statuses=in_flight,
        in_flight_pointer=in_flight_pointer,
        in_flight_values=in_flight_values,
        body_template=body_template,
        token_format=token_format,
        first_sent_header=first_sent_header,
        body_pointer=t.pointer("body_pointer"),
        final_state_via=t.enum("final_state_via", FinalStateVia),
        routes=routes,
        route_pointer=route_pointer,
    )


_ROUTE_KEYS: Final = ("method", "path", "body_pointer", "final_state_via")


def _routes(t: TomlTable) -> dict[str, CreateRoute]:
    """[create.routes.<name>]: further routes of the same API, each a method and a path."""
    raw = t.get("routes")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise t.fail("routes", f"must be a table of routes, got {toml_type(raw)}")
    routes: dict[str, CreateRoute] = {}
    for name, value in raw.items():
        if not _ROUTE_NAME.match(name):
            raise t.fail(f"routes.{name}", "a route name is lower case letters, digits, '_', '-'")
        if not isinstance(value, dict):
            raise t.fail(f"routes.{name}", f"must be a table, got {toml_type(value)}")
        table = TomlTable(t.file, f"{t.prefix}.routes.{name}", value)
        unknown = table.unknown_keys(_ROUTE_KEYS)
        if unknown:
            raise unknown[0]
        routes[name] = CreateRoute(
            method=table.required("method", table.choice("method", _CREATE_METHODS)),
            path=table.required("path", table.template("path", allowed=(), command=True)),
            body_pointer=table.pointer("body_pointer"),
            final_state_via=table.enum("final_state_via", FinalStateVia),
        )
    return routes


def parse_status(
    t: TomlTable, create: CreateSpec | None, convention: Convention | None = Convention.plain
) -> StatusSpec:
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
    state_pointer = t.pointer("state_pointer")
    # Under an Azure convention the monitor decides where the state sits (models/conventions).
    if convention is not None and convention not in _AZURE:
        state_pointer = t.required("state_pointer", state_pointer)
    return StatusSpec(
        method=method,
        path=path,
        state_pointer=state_pointer,
        state_default=t.text("state_default"),
        progress_pointer=t.pointer("progress_pointer"),
        started_at_pointer=t.pointer("started_at_pointer"),
        poll_hint_pointer=t.pointer("poll_hint_pointer"),
        expiry_pointer=t.pointer("expiry_pointer"),
        result_ref_pointer=t.pointer("result_ref_pointer"),
        error_pointer=error_pointer,
        error_code_pointer=t.pointer("error_code_pointer"),
        detail_state_pointer=t.pointer("detail_state_pointer"),
        not_found_grace_seconds=t.seconds("not_found_grace_seconds", default=0.0, zero_ok=True),
    )


def parse_states(t: TomlTable, status: StatusSpec | None) -> StateTable:
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
    error_codes = _outcome_table(t, "error_codes")
    detail = _outcome_table(t, "detail")
    if status is not None and error_codes and not status.error_code_pointer:
        raise t.fail("error_codes", "needs status.error_code_pointer to read the code")
    if status is not None and detail and not status.detail_state_pointer:
        raise t.fail("detail", "needs status.detail_state_pointer to read the finer state")
    otherwise = t.choice("otherwise", ("pending", "unknown")) or "unknown"
    return StateTable(
        pending=values["pending"],
        cancelling=values["cancelling"],
        succeeded=values["succeeded"],
        failed=values["failed"],
        cancelled=values["cancelled"],
        expired=values["expired"],
        error_codes=error_codes,
        detail=detail,
        otherwise=RemoteStatus(otherwise),
        case_insensitive=t.boolean("case_insensitive", default=False),
    )


_OUTCOMES: Final = {s.value: s for s in RemoteStatus if s is not RemoteStatus.unknown}


def _outcome_table(t: TomlTable, key: str) -> dict[str, RemoteStatus]:
    """A table of provider value -> outcome class (pending, succeeded, failed, ...)."""
    raw = t.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise t.fail(key, f"must be a table of value = outcome, got {toml_type(raw)}")
    table: dict[str, RemoteStatus] = {}
    for value, outcome in raw.items():
        if outcome not in _OUTCOMES:
            choices = ", ".join(_OUTCOMES)
            raise t.fail(f"{key}.{value}", f"must be one of: {choices}, got {outcome!r}")
        table[str(value)] = _OUTCOMES[outcome]
    return table


def parse_cancel(t: TomlTable) -> CancelSpec:
    return CancelSpec(
        method=t.required("method", t.choice("method", _CANCEL_METHODS)),
        path=t.required("path", t.template("path", allowed=("job_id",), needed=("job_id",))),
        accepted_statuses=t.status_codes("accepted_statuses", default=(200, 202, 204)),
    )


def parse_reconciliation(t: TomlTable) -> ReconciliationSpec:
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


def parse_result(
    t: TomlTable, status: StatusSpec | None, convention: Convention | None = None
) -> ResultSpec:
    fetch = t.required("fetch", t.choice("fetch", _RESULT_FETCHES))
    path = t.template("path", allowed=("job_id", "result_ref"))
    if fetch == "path" and path is None:
        raise t.fail("path", "required when result.fetch = 'path'")
    if fetch != "path" and path is not None:
        raise t.fail("path", "only allowed when result.fetch = 'path'")
    needs_ref = fetch in ("url", "inline") or (path is not None and "{result_ref}" in path)
    # "" is a pointer too: the whole status body is the result (RFC 6901 section 5).
    # An Azure convention finds the result itself: the monitor's resourceLocation, the
    # Location, the original URI or the final answer's body (models/conventions.py).
    if (convention is None or convention in _AZURE) and fetch == "url":
        needs_ref = False
    if needs_ref and status is not None and status.result_ref_pointer is None:
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
        raise t.fail("content_type", f"must be a string, got {toml_type(content_type)}")
    jsonl = t.boolean("jsonl", default=False)
    items_pointer = t.pointer("items_pointer")
    if jsonl and items_pointer is not None:
        raise t.fail("items_pointer", "not allowed with jsonl = true: every line is an item")
    return ResultSpec(
        fetch=fetch,
        path=path,
        allowed_origins=tuple(origins),
        content_type=content_type or None,
        **_result_digests(t, fetch),
        record_count_pointer=t.pointer("record_count_pointer"),
        items_pointer=items_pointer,
        failed_items_pointer=t.pointer("failed_items_pointer"),
        **_item_outcomes(t),
        max_bytes=t.count("max_bytes", default=50 * 1024 * 1024, maximum=MAX_RESULT_BYTES),
        max_failed_fraction=t.fraction("max_failed_fraction", default=1.0),
        jsonl=jsonl,
    )


class _Digests(TypedDict):
    digests: tuple[DigestField, ...]
    digests_required: bool
    checksum_pointer: str | None
    checksum_algorithm: ChecksumAlgorithm
    checksum_encoding: ChecksumEncoding


class _ItemRules(TypedDict):
    item_status_pointer: str | None
    item_failed_values: tuple[str, ...]
    item_succeeded_values: tuple[str, ...]
    item_error_pointer: str | None
    item_status_code_pointer: str | None
    item_ref_pointer: str | None
    completed_count_pointer: str | None
    failed_count_pointer: str | None
    total_count_pointer: str | None
    error_file_pointer: str | None


def _result_digests(t: TomlTable, fetch: str) -> _Digests:
    """result.digests (response fields) and result.checksum_* (the status body's digest)."""
    names = t.str_list("digests")
    fields: list[DigestField] = []
    for index, name in enumerate(names or ()):
        if name not in {f.value for f in DigestField}:
            known = ", ".join(f.value for f in DigestField)
            raise t.fail(f"digests[{index}]", f"must be one of: {known}; got {name!r}")
        if DigestField(name) in fields:
            raise t.fail(f"digests[{index}]", f"{name!r} is listed twice")
        fields.append(DigestField(name))
    if names == ():
        raise t.fail("digests", "must list at least one digest field (or be left out)")
    if fields and fetch == "inline":
        raise t.fail("digests", "needs a result response; fetch = 'inline' has none")
    if t.get("digests_required") is not None and not fields:
        raise t.fail("digests_required", "only allowed with result.digests")
    pointer = t.pointer("checksum_pointer")
    algorithm = t.enum("checksum_algorithm", ChecksumAlgorithm)
    encoding = t.enum("checksum_encoding", ChecksumEncoding)
    for key, value in (("checksum_algorithm", algorithm), ("checksum_encoding", encoding)):
        if value is not None and pointer is None:
            raise t.fail(key, "only allowed with result.checksum_pointer")
    return {
        "digests": tuple(fields),
        "digests_required": t.boolean("digests_required", default=True),
        "checksum_pointer": pointer,
        "checksum_algorithm": algorithm or ChecksumAlgorithm.sha256,
        "checksum_encoding": encoding or ChecksumEncoding.hex,
    }


def _item_outcomes(t: TomlTable) -> _ItemRules:
    """How each item's outcome is read, and the counts the status body declares."""
    status_pointer = t.pointer("item_status_pointer")
    failed_values = t.str_list("item_failed_values") or ()
    succeeded_values = t.str_list("item_succeeded_values") or ()
    if bool(status_pointer) != bool(failed_values):
        raise t.fail("item_failed_values", "item_status_pointer and item_failed_values go together")
    if succeeded_values and not status_pointer:
        raise t.fail("item_succeeded_values", "only allowed with result.item_status_pointer")
    overlap = sorted(set(failed_values) & set(succeeded_values))
    if overlap:
        raise t.fail("item_succeeded_values", f"{overlap[0]!r} is also an item_failed_values")
    failed_count = t.pointer("failed_count_pointer")
    error_file = t.pointer("error_file_pointer")
    if error_file is not None and failed_count is None:
        # The failed lines are elsewhere: only the declared count says how many there are.
        raise t.fail("error_file_pointer", "needs result.failed_count_pointer")
    return {
        "item_status_pointer": status_pointer,
        "item_failed_values": failed_values,
        "item_succeeded_values": succeeded_values,
        "item_error_pointer": t.pointer("item_error_pointer"),
        "item_status_code_pointer": t.pointer("item_status_code_pointer"),
        "item_ref_pointer": t.pointer("item_ref_pointer"),
        "completed_count_pointer": t.pointer("completed_count_pointer"),
        "failed_count_pointer": failed_count,
        "total_count_pointer": t.pointer("total_count_pointer"),
        "error_file_pointer": error_file,
    }


def parse_webhook(t: TomlTable) -> WebhookSpec:
    scheme = t.enum("scheme", WebhookScheme) or WebhookScheme.hmac
    signature_header = t.header_name("signature_header")
    timestamp_header = t.header_name("timestamp_header")
    event_id_pointer = t.pointer("event_id_pointer")
    encoding = t.enum("signature_encoding", ChecksumEncoding)
    if scheme is WebhookScheme.hmac:
        t.required("signature_header", signature_header)
        t.required("timestamp_header", timestamp_header)
        t.required("event_id_pointer", event_id_pointer)
    else:
        hmac_only = (signature_header, timestamp_header, event_id_pointer, encoding)
        for key, value in zip(_HMAC_ONLY, hmac_only, strict=True):
            if value is not None:
                raise t.fail(
                    key,
                    "only allowed with webhook.scheme = 'hmac': Standard Webhooks fixes the "
                    "headers (webhook-id, webhook-timestamp, webhook-signature) and the encoding",
                )
    job_id_pointer = t.required("job_id_pointer", t.pointer("job_id_pointer"))
    secret_env, secret_file = _secret_reference(t)
    return WebhookSpec(
        scheme=scheme,
        signature_header=signature_header,
        timestamp_header=timestamp_header,
        event_id_pointer=event_id_pointer,
        signature_encoding=encoding or ChecksumEncoding.hex,
        job_id_pointer=job_id_pointer,
        secret_env=secret_env,
        secret_file=secret_file,
        tolerance_seconds=t.seconds("tolerance_seconds", default=300.0, maximum=24 * 3600),
    )


_HMAC_ONLY: Final = (
    "signature_header",
    "timestamp_header",
    "event_id_pointer",
    "signature_encoding",
)


def parse_poll(t: TomlTable) -> PollPolicy:
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
        growth_factor=_growth_factor(t),
    )


def _growth_factor(t: TomlTable) -> float:
    value = t.get("growth_factor")
    if value is None:
        return DEFAULT_GROWTH_FACTOR
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise t.fail("growth_factor", f"must be a number, got {toml_type(value)}")
    # Also refuses nan and inf: neither compares inside the bounds.
    if not MIN_GROWTH_FACTOR <= value <= MAX_GROWTH_FACTOR:
        raise t.fail(
            "growth_factor",
            f"must be between {MIN_GROWTH_FACTOR:g} and {MAX_GROWTH_FACTOR:g}, got {value:g}",
        )
    return float(value)


def parse_limits(t: TomlTable) -> Limits:
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
        max_result_fetches=t.count("max_result_fetches", default=5, maximum=100),
        result_fetch_deadline_seconds=t.seconds("result_fetch_deadline_seconds", default=900.0),
    )


def _secret_reference(t: TomlTable) -> tuple[str | None, str | None]:
    """Exactly one of secret_env / secret_file, each a reference, never the secret."""
    secret_env = t.env_name("secret_env")
    secret_file = t.text("secret_file")
    if secret_file is not None and not secret_file.startswith("/"):
        raise t.fail("secret_file", "must be an absolute path")
    if (secret_env is None) == (secret_file is None):
        raise t.fail("secret_env", "exactly one of secret_env and secret_file is required")
    return secret_env, secret_file
