"""Provider contracts as typed, immutable values.

A contract file (TOML, one per provider) is parsed into these by
``models.contracts.loader``. Everything that differs between providers lives
here as data; the HTTP edge and the decision core read it and never branch
on a provider's name.

JSON pointers (RFC 6901, e.g. ``/result/url``) locate fields in response bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from jobwarden.models.contracts.command_schema import CommandSchema
from jobwarden.models.states import OperationState


class RemoteStatus(StrEnum):
    pending = "pending"  # the remote job has not finished
    succeeded = "succeeded"  # the provider says the job finished well (result not yet checked)
    failed = "failed"  # the provider says the job failed
    cancelled = "cancelled"  # the provider says the job was cancelled
    expired = "expired"  # the provider says the job expired
    unknown = "unknown"  # anything the state table does not name


class TokenPlacement(StrEnum):
    header = "header"  # e.g. Idempotency-Key, Repeatability-Request-ID
    body = "body"  # e.g. a request_id field in the JSON body


class JobLocator(StrEnum):
    body = "body"  # job id at create.job_id_pointer in the response body
    location = "location"  # status URL in the Location header
    operation_location = "operation_location"  # status URL in the Operation-Location header
    # The contract's convention decides (models/conventions/strategies.py): which header names the
    # status monitor, and what a create answer without one means.
    convention = "convention"


class Convention(StrEnum):
    """A published long-running-operation convention, implemented once as a polling
    strategy in ``models/conventions/strategies.py``; a contract's own pointers and tables override
    its defaults."""

    plain = "plain"  # nothing assumed: the contract says everything (as before conventions)
    # Azure REST API Guidelines, "Long-running operations": Operation-Location status monitor.
    azure_lro = "azure-lro"
    # ARM RPC, "Asynchronous operations": Azure-AsyncOperation, Location, provisioningState.
    azure_arm = "azure-arm"
    google_aip151 = "google-aip151"  # AIP-151 Operation: done / error / response
    openai_batch = "openai-batch"  # OpenAI Batch: validating ... completed, output_file_id


class FinalStateVia(StrEnum):
    """Where a finished Azure operation's final result is read (AutoRest
    ``x-ms-long-running-operation-options.final-state-via``, azure-core's lro_options)."""

    location = "location"  # GET the create answer's Location URL
    azure_async_operation = "azure-async-operation"  # the Azure-AsyncOperation monitor's body
    original_uri = "original-uri"  # GET the create request's own URL (PUT/PATCH)
    operation_location = "operation-location"  # the Operation-Location monitor's body


class ReconciliationPath(StrEnum):
    same_token_retry = (
        "same_token_retry"  # resend the create with the same token; the provider replays
    )
    lookup_by_reference = "lookup_by_reference"  # GET a lookup endpoint with the token as reference
    none = "none"  # at-most-once cannot be proven; an ambiguous create escalates


@dataclass(frozen=True, slots=True, kw_only=True)
class AuthSpec:
    """Credentials by reference only: the secret itself never enters a contract."""

    scheme: str  # "bearer" or "header"
    header: str = "Authorization"
    secret_env: str | None = None  # environment variable holding the secret
    secret_file: str | None = None  # file holding the secret


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateRoute:
    """One way to create a remote job: a method and a path, whose ``{command.<name>}``
    placeholders are filled from the validated command, percent-encoded as one segment
    (``models/contracts/routes.py``). A contract serves an API, not one route."""

    method: str  # POST, PUT, PATCH or DELETE
    path: str  # relative to base_url; may carry a query (?api-version=...)
    # The JSON body is the command's value here ("" is the whole command, the default);
    # nothing found there, or a DELETE, sends no body.
    body_pointer: str | None = None
    final_state_via: FinalStateVia | None = None  # None: the convention's default per method


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateSpec:
    method: str  # POST, PUT, PATCH or DELETE: the default route
    path: str  # relative to base_url; {command.<name>} placeholders filled from the command
    token_placement: TokenPlacement
    token_name: str  # header name or body field name
    job_locator: JobLocator
    job_id_pointer: str | None = None  # required when job_locator is body
    # 2xx statuses that mean "accepted"; any other 2xx is an ambiguous answer.
    accepted_statuses: tuple[int, ...] = (200, 201, 202)
    # "Still processing the first request under this token" (IETF Idempotency-Key draft:
    # 409; Azure repeatable requests: 409 while in progress): retry the same token later.
    # Any other 409/422 means "same token, different body": a contract violation.
    in_flight_statuses: tuple[int, ...] = (409,)
    # Where one status serves both, the body tells them apart: in flight only when the
    # value at in_flight_pointer is one of in_flight_values.
    in_flight_pointer: str | None = None
    in_flight_values: tuple[str, ...] = ()
    body_template: str = (
        "command"  # "command": the command is the body; "wrapped": {"command": ...}
    )
    # The token's shape, made with the row and never regenerated: "prefixed_hex"
    # (jw-<32 hex>) or "uuid" (AIP-155 asks request_id to be a UUID; Azure a GUID).
    token_format: str = "prefixed_hex"
    # A header carrying the first attempt's IMF-fixdate, identical on every retry
    # (OASIS Repeatable Requests 1.0: Repeatability-First-Sent).
    first_sent_header: str | None = None
    body_pointer: str | None = None  # the default route's body (see CreateRoute)
    final_state_via: FinalStateVia | None = None  # the default route's final state
    # Further named routes; the command's value at route_pointer names the one to take
    # (absent: the default route). A name the contract does not list is refused at intake.
    routes: Mapping[str, CreateRoute] = field(default_factory=dict)
    route_pointer: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusSpec:
    method: str
    path: str | None  # template with {job_id}; None when the status URL comes from a header
    # Where the raw state sits. With an Azure convention None means the convention's own:
    # /status on a status monitor, /properties/provisioningState on an ARM resource.
    state_pointer: str | None
    # Used when the state field is absent: AIP-151 omits `done` until the operation finishes.
    state_default: str | None = None
    progress_pointer: str | None = None
    # When the remote job started (RFC 3339 or Unix seconds): with progress, the next
    # poll aims at the extrapolated finish. Without it, our acceptance time stands in.
    started_at_pointer: str | None = None
    # The provider's own estimate of the finish (RFC 3339 or Unix seconds), such as an
    # `estimated_completion_time`: two readings that agree aim the next poll at it.
    eta_pointer: str | None = None
    # Item counts as progress where no percentage is given (OpenAI Batch `request_counts`):
    # (completed + failed) / total; counts beyond the total are no evidence at all.
    items_completed_pointer: str | None = None
    items_failed_pointer: str | None = None
    items_total_pointer: str | None = None
    poll_hint_pointer: str | None = None  # seconds until the next poll, as the provider suggests
    expiry_pointer: str | None = None  # RFC 3339 time after which the job may not run
    result_ref_pointer: str | None = None  # where a finished job names its result
    error_pointer: str | None = None  # presence of a value here means failed (AIP-151 `error`)
    error_code_pointer: str | None = None  # the failed job's code, mapped by states.error_codes
    detail_state_pointer: str | None = None  # a finer state beside the main one (states.detail)
    # Seconds after acceptance during which 404 means "not visible yet" (eventual consistency).
    not_found_grace_seconds: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class StateTable:
    """Raw provider state values (as strings; JSON true/false become "true"/"false")."""

    pending: frozenset[str]
    succeeded: frozenset[str]
    failed: frozenset[str]
    cancelled: frozenset[str] = frozenset()
    expired: frozenset[str] = frozenset()
    # Raw values that mean "cancel received, not yet done" (e.g. OpenAI "cancelling").
    cancelling: frozenset[str] = frozenset()
    # A failed job's error code read at status.error_code_pointer, mapped to the outcome it
    # really is: AIP-151 google.rpc.Code 1 CANCELLED -> cancelled, 4 DEADLINE_EXCEEDED ->
    # expired; Azure error.code "OperationTimedOut" -> expired. Unlisted codes stay failed.
    error_codes: Mapping[str, RemoteStatus] = field(default_factory=dict)
    # The finer state read at status.detail_state_pointer (e.g. AIP-151 metadata.state),
    # by value; a value not listed here is an unknown state, whatever `done` says.
    detail: Mapping[str, RemoteStatus] = field(default_factory=dict)
    # What a state none of the lists names is. unknown stops automation; the ARM RPC
    # ("Asynchronous operations": only Succeeded, Failed and Canceled are terminal) makes
    # every other provisioningState pending.
    otherwise: RemoteStatus = RemoteStatus.unknown
    # Azure compares states without case (azure-core's _FINISHED / _FAILED sets).
    case_insensitive: bool = False

    def classify(self, raw: str) -> RemoteStatus:
        if self.case_insensitive:
            raw = _casefolded(self).get(raw.casefold(), raw)
        if raw in self.pending or raw in self.cancelling:
            return RemoteStatus.pending
        if raw in self.succeeded:
            return RemoteStatus.succeeded
        if raw in self.failed:
            return RemoteStatus.failed
        if raw in self.cancelled:
            return RemoteStatus.cancelled
        if raw in self.expired:
            return RemoteStatus.expired
        return self.otherwise


def _casefolded(table: StateTable) -> dict[str, str]:
    """Each listed state by its case-folded spelling (small tables: built per call)."""
    listed = (table.pending | table.cancelling | table.succeeded | table.failed) | (
        table.cancelled | table.expired
    )
    return {state.casefold(): state for state in listed}


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelSpec:
    method: str
    path: str  # template with {job_id}
    accepted_statuses: tuple[int, ...] = (200, 202, 204)


@dataclass(frozen=True, slots=True, kw_only=True)
class CleanupSpec:
    """``[cleanup]``: the provider leaves resources when a job ends ``after`` one of these
    ways, and this endpoint removes them; it is called once, and its confirmation awaited
    like a cancel's (models/cleanup.py).

    Modelled on ARM RPC "Delete Resource Asynchronously" (RPC-Delete-V1-01: a synchronous
    DELETE answers 200 or 204, a long-running one 202 with Location; 204 also when the
    resource does not exist, and a GET of a deleted resource answers 404) and on the
    OpenAI Files API ("Delete file" answers ``{"id": ..., "deleted": true}``).
    """

    after: frozenset[str]  # failed, cancelled, expired: the ends that leave resources
    method: str
    path: str  # template with {job_id}
    # Answers that mean "removed" outright (ARM: 200/204; a 404/410 means already gone).
    confirmed_statuses: tuple[int, ...] = (200, 204)
    accepted_statuses: tuple[int, ...] = (202,)  # "removal started": confirm by checks
    # When set, a confirmed status confirms only if this pointer reads one of the values
    # (OpenAI: /deleted == true); otherwise the answer counts as accepted.
    confirmed_pointer: str | None = None
    confirmed_values: tuple[str | bool | int, ...] = (True,)
    # A GET that answers 404/410 once the resources are gone (ARM); None: only the
    # call's own answer can confirm.
    check_path: str | None = None
    gone_statuses: tuple[int, ...] = (404, 410)
    deadline_seconds: float = 600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ReconciliationSpec:
    path: ReconciliationPath
    lookup_path: str | None = None  # template with {token}, for lookup_by_reference
    lookup_job_id_pointer: str | None = None


class DigestField(StrEnum):
    """A response field carrying a digest of the result, named as the contract writes it."""

    repr_digest = "repr-digest"  # RFC 9530: digest of the selected representation
    content_digest = "content-digest"  # RFC 9530: digest of the message content
    content_md5 = "content-md5"  # RFC 1864: base64 of the 16 MD5 octets
    x_goog_hash = "x-goog-hash"  # Google Cloud Storage: crc32c=<base64>,md5=<base64>


class ChecksumAlgorithm(StrEnum):
    sha256 = "sha256"  # FIPS 180-4 SHA-256
    sha512 = "sha512"  # FIPS 180-4 SHA-512
    md5 = "md5"  # RFC 1321: corruption, not tampering
    crc32c = "crc32c"  # Castagnoli CRC (RFC 4960 appendix B), 4 octets big-endian


class ChecksumEncoding(StrEnum):
    hex = "hex"  # lower or upper case hexadecimal
    base64 = "base64"  # RFC 4648 section 4, padded


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultSpec:
    """How a finished job's result is fetched and validated."""

    # "url": the result reference is an absolute or base-relative URL to GET.
    # "inline": the status body at result_ref_pointer is the result itself.
    # "path": GET path template with {job_id} / {result_ref}.
    fetch: str
    path: str | None = None
    allowed_origins: tuple[str, ...] = ()  # empty means: only the contract's base_url origin
    content_type: str | None = "application/json"
    # Digest fields of the result response to verify (models.results.digests), and whether at least
    # one usable digest must be there: a promised check that is missing is a failed check.
    digests: tuple[DigestField, ...] = ()
    digests_required: bool = True
    # A digest in the status body, in the contract's algorithm and encoding.
    checksum_pointer: str | None = None
    checksum_algorithm: ChecksumAlgorithm = ChecksumAlgorithm.sha256
    checksum_encoding: ChecksumEncoding = ChecksumEncoding.hex
    record_count_pointer: str | None = None  # in the result body: declared record count
    # The result's items: the list at items_pointer (the whole document without it), or
    # every line when jsonl. Without a per-item rule below every item counts as succeeded.
    items_pointer: str | None = None
    # Where each page of a paged result names the next page's URL (models/result_pages):
    # set, the result is collected page by page, its items at items_pointer ("/value"
    # without it). An Azure convention pages at "/nextLink" without it.
    next_link_pointer: str | None = None
    failed_items_pointer: str | None = None  # in the result body: a separate list of failures
    # Per-item outcome (Azure-style list with a status field; Google- and OpenAI-style JSON
    # Lines whose failed lines carry an error or an HTTP status >= 400).
    item_status_pointer: str | None = None
    item_failed_values: tuple[str, ...] = ()
    item_succeeded_values: tuple[str, ...] = ()  # when set, any other status is a problem
    item_error_pointer: str | None = None  # a value other than null here: the item failed
    item_status_code_pointer: str | None = None  # an HTTP status >= 400 here: the item failed
    item_ref_pointer: str | None = None  # the reference recorded for a failed item
    # Counts the status body declares when the job finished (OpenAI request_counts),
    # cross-checked with the items found; and a second file holding the failed lines.
    completed_count_pointer: str | None = None
    failed_count_pointer: str | None = None
    total_count_pointer: str | None = None
    error_file_pointer: str | None = None
    # Where that second file's bytes are fetched (OpenAI: /v1/files/{error_file}/content):
    # with it, the failed lines are downloaded, stored and counted, not inferred.
    error_file_path: str | None = None
    max_bytes: int = 50 * 1024 * 1024
    # Fraction of failed items above which the result is invalid (per-item failures).
    max_failed_fraction: float = 1.0
    # Raw result lines as JSONL (OpenAI batch output) rather than one JSON document.
    jsonl: bool = False
    # The download consumes the result or marks it delivered (a one-time link): it is
    # attempted at most once, and one cut off is never requested again.
    single_use: bool = False
    # Where the status body says when the result URL stops working (a signed URL such as
    # an S3 presigned GET: RFC 3339 or Unix seconds); collection must start before it.
    url_expiry_pointer: str | None = None
    # Past that expiry: read the status again for a fresh URL (True), or stop (False).
    refresh_expired_url: bool = False
    # Ends after which the provider leaves partial output at the result reference (OpenAI
    # Batch: a cancelled or expired batch keeps an output file of the requests it did):
    # it is collected and recorded as partial, and the operation still ends as it ended.
    partial_after: tuple[str, ...] = ()


class WebhookScheme(StrEnum):
    """How a webhook delivery proves it comes from the provider."""

    hmac = "hmac"  # HMAC-SHA256 over timestamp + "." + raw body, in headers the contract names
    # Standard Webhooks 1.0: webhook-id, webhook-timestamp and webhook-signature ("v1,<base64>"
    # HMAC-SHA256 over id.timestamp.body, keyed by a whsec_<base64> secret).
    standard = "standard"


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookSpec:
    """Verification of deliveries to POST /v1/webhooks/{provider}; the secret by reference."""

    job_id_pointer: str  # in the body: which remote job the event is about
    scheme: WebhookScheme = WebhookScheme.hmac
    # hmac only: Standard Webhooks fixes its headers, its encoding and its event id (webhook-id).
    signature_header: str | None = None
    timestamp_header: str | None = None  # Unix seconds, part of the signed content
    event_id_pointer: str | None = None  # in the body: the event id, for deduplication
    signature_encoding: ChecksumEncoding = ChecksumEncoding.hex
    secret_env: str | None = None
    secret_file: str | None = None
    tolerance_seconds: float = 300.0
    # A webhook brings a status read forward at most once per this interval per operation:
    # signed deliveries with no provider hint must not spend the status budget in seconds.
    min_status_interval_seconds: float = 10.0


# The backoff's growth per pending answer; every wait after one is also held to
# (growth - 1) x the job's age, so a finished job is found at most that share of its
# duration late (2 meant 100 %). 1.25: that promise costs requests without progress
# (17 for a 60 s job; scripts/bench_polling.py, docs/contracts.md `[poll]`). Below
# 1.05 a poll is barely later than the last; above 4 a job is found 3 x its age late.
DEFAULT_GROWTH_FACTOR = 1.25
MIN_GROWTH_FACTOR = 1.05
MAX_GROWTH_FACTOR = 4.0


@dataclass(frozen=True, slots=True, kw_only=True)
class CommandSpec:
    """The command's JSON Schema (2020-12), checked at load and applied at intake, before
    the fingerprint: defaults filled, unknown fields, types and patterns enforced."""

    schema: CommandSchema  # inline ([command.schema]) or read from schema_file
    schema_file: str | None = None  # relative to the contract file, inside its directory


@dataclass(frozen=True, slots=True, kw_only=True)
class PollPolicy:
    initial_delay_seconds: float
    base_seconds: float
    max_seconds: float
    jitter_floor: float  # lower bound of the random factor in [jitter_floor, 1]
    hint_floor_seconds: float  # provider hints and Retry-After shorter than this are raised to it
    # Validated but never used to shorten a provider's delay: invariant 3 wins over clamping.
    hint_cap_seconds: float
    rate_limit_base_seconds: float  # 429 without Retry-After: backoff starts here ("back off hard")
    max_rate_limited: int  # consecutive 429s before escalating rate_limited
    growth_factor: float = DEFAULT_GROWTH_FACTOR  # backoff growth per pending answer


@dataclass(frozen=True, slots=True, kw_only=True)
class RateLimit:
    """At most ``burst`` requests at once, refilled at ``requests_per_second``: in any
    one-second window a credential sees at most ``requests_per_second + burst`` requests
    (``[rate_limit]``; parsed and applied in ``models/provider/rate_limits.py``)."""

    requests_per_second: float
    burst: int = 1
    # Each tenant's share of the rate when several wait for it, by weight (absent: 1);
    # models/provider/fair_shares.py.
    tenant_weights: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class Breaker:
    """``[breaker]``: when a provider's answers across operations say it is down, pause it
    as one incident (models/provider/breaker.py). Shares are of the answers counted in the
    sliding window; none opens the breaker before ``minimum_count`` answers are in it."""

    window_seconds: float = 60.0
    minimum_count: int = 20
    server_error_share: float = 0.5  # 5xx answers
    transport_share: float = 0.5  # no usable HTTP answer (timeouts, resets, refused)
    unknown_state_share: float = 0.5  # states the contract's table does not name
    denied_share: float = 0.2  # 401/403: a revoked credential fails every operation at once
    # 429s feed the shared rate limiter, not the breaker, unless more than this many arrive
    # in one window: then the provider is rate limiting beyond what waiting fixes.
    max_rate_limited: int = 100
    cooldown_seconds: float = 60.0  # open, before one operation probes the provider


# A day: long enough for a person to see and weigh a request, short enough that nothing
# approved next week is sent under this week's view of it.
DEFAULT_APPROVAL_WINDOW_SECONDS = 86400.0
# The two-person rule: at most two distinct approvers, neither the submitter (payments,
# production deploys). More would need a quorum nobody has asked for.
MAX_APPROVALS_REQUIRED = 2


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    create_deadline_seconds: float
    result_deadline_seconds: float
    cancel_deadline_seconds: float
    max_status_requests: int
    max_transport_failures: int
    request_timeout_seconds: float
    max_create_attempts: int = 5
    # Result collection has bounds of its own: a download that keeps failing, or a
    # reference that never answers, ends instead of being fetched forever.
    max_result_fetches: int = 5
    result_fetch_deadline_seconds: float = 900.0
    # How long an operation may wait for a human's approval (capped by its business
    # deadline); its create and result deadlines start only once it is approved.
    approval_window_seconds: float = DEFAULT_APPROVAL_WINDOW_SECONDS


@dataclass(frozen=True, slots=True, kw_only=True)
class ConcurrencySpec:
    """``[concurrency]``: how many unfinished operations may share one concurrency key."""

    limit: int = 1  # 1 is a lock: one deploy at a time per target


# [follow_ups.<name>] (models/contracts/follow_ups.py): the operations that may follow one.


class Source(StrEnum):
    command = "command"  # the parent's command, as stored (defaults filled in)
    result = "result"  # the parent's collected result (a JSON object)


@dataclass(frozen=True, slots=True, kw_only=True)
class ParentField:
    """A top-level field of the parent's command or collected result: ``result.amount``."""

    source: Source
    name: str

    def __str__(self) -> str:
        return f"{self.source.value}.{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class AmountRule:
    """The follow-up command's ``amount_field`` (whole minor units) summed over the
    parent's live follow-ups of this name never exceeds the parent's ``limit`` field."""

    amount_field: str
    limit: ParentField


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowUpSpec:
    name: str  # the follow-up's kind, as the table names it: capture, refund, rollback
    provider: str  # the provider contract that performs it
    parent_states: frozenset[OperationState]  # the parent must be in one of these
    requires_approval: bool = False  # its own approval, whatever its contract says
    at_most_one: bool = False  # one per parent: its key is derived from parent and name
    amount: AmountRule | None = None
    # The parent's ends after which the worker starts it on its own (author rule:<name>).
    automatic_after: frozenset[OperationState] = frozenset()
    # The automatic start's command: follow-up field -> the parent's field it copies.
    command_from_parent: Mapping[str, ParentField] = field(default_factory=dict)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderContract:
    name: str
    source_file: str
    base_url: str
    create: CreateSpec
    status: StatusSpec
    states: StateTable
    reconciliation: ReconciliationSpec
    poll: PollPolicy
    limits: Limits
    cancel: CancelSpec | None = None
    cleanup: CleanupSpec | None = None
    result: ResultSpec | None = None
    auth: AuthSpec | None = None
    webhook: WebhookSpec | None = None
    command: CommandSpec | None = None  # None: any JSON object, fingerprinted as written
    rate_limit: RateLimit | None = None  # None: no limit of ours, only the provider's 429s
    breaker: Breaker | None = None  # None: no breaker; failures stop each operation alone
    requires_approval: bool = False
    approvals_required: int = 1  # 2: two distinct approvers, neither the submitter
    concurrency: ConcurrencySpec | None = None  # None: a named key admits one at a time
    base_url_env: str | None = None  # environment variable that overrides base_url when set
    plugin: str | None = None  # "module:attribute" of a ProviderPlugin for code-needing providers
    extra_headers: dict[str, str] = field(default_factory=dict)
    convention: Convention = (
        Convention.plain
    )  # the polling strategy (models/conventions/strategies.py)
    # The follow-up operations an operation of this contract allows, by name.
    follow_ups: Mapping[str, FollowUpSpec] = field(default_factory=dict)
