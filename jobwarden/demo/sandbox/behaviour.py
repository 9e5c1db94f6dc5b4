"""Scripted per-job behaviour for the sandbox provider.

A create request's body may carry a ``"behaviour"`` object; it is parsed here
into an immutable :class:`Behaviour`. Unknown keys and wrongly typed values are
rejected (the create answers 400) so a typo in a test script fails loudly
instead of silently running the default behaviour.

The ``hostile_*`` and ``job_id_style`` knobs make the sandbox a misbehaving
provider (deep JSON, numbers past 64 bits, drips, huge bodies, foreign origins,
control characters, an echoed credential); :mod:`jobwarden.demo.sandbox.hostile`
builds those answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jobwarden.demo.sandbox.conventions import RESULT_DIGESTS, RESULT_SHAPES, min_line_bytes
from jobwarden.demo.sandbox.webhooks import (
    WebhookBehaviour,
    WebhookOptionError,
    parse_webhook_option,
)

OUTCOMES = ("succeeded", "failed", "expired")
CREATE_RESPONSES = ("normal", "drop", "hold")
# How a time-driven job (seconds_to_finish) reports its way to the end, for issue 38's
# polling bench and its acceptance tests: a steady pace; the same pace to 90 % by 60 % of
# the time, then 90 % until the end; 60 % in the first fifth, then slower; or no progress
# but an estimated_completion_time that starts at 60 % of the time and slips to the end.
PROGRESS_SHAPES = ("steady", "stall90", "front_loaded", "eta_slips")
CANCEL_MODES = ("honour", "race", "never")
# What a failed, cancelled or expired job leaves, and how its cleanup endpoint answers
# (ARM RPC "Delete Resource Asynchronously", RPC-Delete-V1-01): nothing; resources a
# DELETE removes at once (204); or removes in the background (202, then a GET of them
# answers 200 "deleting" cleanup_checks times and 404 after); or never (409 each time).
CLEANUP_MODES = ("none", "sync", "async", "refuse")
ERROR_ACTIONS = ("drop", "hold", "malformed")
# Hostile modes: what a misbehaving provider sends (first value: behave).
HOSTILE_STATUS = (
    "none",
    "deep_json",  # a status object holding deep_json_depth nested arrays
    "big_numbers",  # 2^64, -2^64, 2^70 and 1e300 beside the usual fields
    "echo_credential",  # the Authorization header received, echoed in body and headers
    "huge",  # a huge_bytes answer, generated while it is written
    "drip",  # the body one byte per drip_interval_seconds
    "drip_headers",  # status line, headers and body one byte per drip_interval_seconds
)
HOSTILE_CREATE = (
    "none",
    "big_numbers",
    "foreign_location",  # Location names foreign_origin
    "foreign_operation_location",  # Operation-Location names foreign_origin
    "huge",
    "drip",
)
HOSTILE_RESULT = (
    "none",
    "foreign_host",  # the result reference names foreign_origin
    "newline_reference",  # the result reference holds a newline
    "tab_reference",  # the result reference holds a tab
    "deep_json",  # the result document holds deep_json_depth nested arrays
    "huge",  # a huge_bytes result, generated while it is written
    "drip",
)
JOB_ID_STYLES = (
    "normal",
    "newline",  # job_<hex>\nx
    "tab",  # job_<hex>\tx
    "long",  # 600 characters past the usual id
    "dot_segments",  # job_<hex>/../x: climbs out of the job's path
)


class BehaviourError(ValueError):
    """The behaviour object is malformed; the message says which field."""


@dataclass(frozen=True)
class StatusError:
    """One phase of scripted status errors: ``count`` calls answered with ``code``."""

    code: int | str  # an HTTP status code, or "drop" / "hold" / "malformed" (200, not JSON)
    count: int = 1
    retry_after: int | None = None
    retry_after_date: int | None = None
    hold_seconds: float = 5.0


@dataclass(frozen=True)
class Behaviour:
    polls_to_finish: int = 2
    seconds_to_finish: float | None = None
    outcome: str = "succeeded"
    error_code: str = "job_failed"
    error_message: str = "the job failed (scripted by the sandbox)"
    progress: bool = True
    progress_shape: str = "steady"
    retry_after: int | None = None
    retry_after_date: int | None = None
    poll_hint: Any = None
    has_poll_hint: bool = False
    create_response: str = "normal"
    hold_seconds: float = 5.0
    status_errors: tuple[StatusError, ...] = ()
    unauthorized_from: int | None = None
    unknown_state_at: int | None = None
    succeed_without_result: bool = False
    expires_in_seconds: float | None = None
    run_past_expiry: bool = False
    cancel: str = "honour"
    result_items: int = 10
    result_failed_items: int = 0
    result_bad_checksum: bool = False
    never_finish: bool = False
    hostile_status: str = "none"
    hostile_from: int = 1  # the first normal status call that is hostile
    hostile_create: str = "none"
    hostile_result: str = "none"
    job_id_style: str = "normal"
    create_retry_after: int | None = None
    deep_json_depth: int = 10_000
    huge_bytes: int = 64 * 1024 * 1024
    drip_interval_seconds: float = 1.0
    # Only ever named in answers: the sandbox never connects anywhere. A loopback default,
    # so a client that wrongly follows it (169.254.169.254 in real life) stays on this host.
    foreign_origin: str = "http://127.0.0.2:9"
    # Conventions, each named after the public spec it models:
    # IETF Idempotency-Key draft / Azure repeatable requests: a repeat of a key whose first
    # request is still being processed (within this many seconds) answers 409 in flight.
    in_flight_seconds: float | None = None
    # OASIS Repeatable Requests 1.0 (Azure): the key must be a GUID and travel with
    # Repeatability-First-Sent (IMF-fixdate), identical on every repeat (else 400).
    require_repeatability: bool = False
    # A synchronous provider: the create answer is the finished job (200, final status).
    synchronous: bool = False
    # Result conventions (jobwarden.demo.sandbox.conventions): the per-item shape of the result,
    # a digest field on its download, and one byte changed after the digests were taken.
    result_shape: str = "sandbox"
    result_digest: str = "none"
    result_altered: bool = False
    # A big OpenAI Batch output file: result_lines succeeded lines of result_line_bytes each
    # (newline included), generated per download and never held (conventions.openai_lines).
    # It sets result_shape "openai_jsonl" and result_items (the counts the status declares).
    result_lines: int | None = None
    result_line_bytes: int = 1024
    # Webhooks on each state change (jobwarden.demo.sandbox.webhooks), with faults on request.
    webhook: WebhookBehaviour | None = None
    # Download conventions (jobwarden.demo.sandbox.downloads), each named after its public doc.
    # Amazon S3 User Guide, "Download and upload objects with presigned URLs": the finished
    # status names an absolute presigned URL (X-Amz-Date, X-Amz-Expires whole seconds,
    # X-Amz-Signature) and its end, presigned afresh on every status read; past the end a
    # GET answers 403 AccessDenied "Request has expired". result_url_expired_first: the
    # first URL handed out was signed result_url_expires_in seconds ago (already expired).
    result_url_expires_in: int | None = None
    result_url_expired_first: bool = False
    # A one-time download link: the first GET consumes it, a later GET answers 410 Gone.
    result_single_use: bool = False
    # The result download closes its connection after this many body bytes (a cut-off).
    result_cut_after_bytes: int | None = None
    # OpenAI Batch: request_counts.failed says this instead of the truth (a lying count).
    declared_failed_items: int | None = None
    # A cancelled job keeps what it completed (OpenAI Batch guide: a cancelled batch's
    # output file holds the requests it finished): the cancelled status names a result.
    partial_on_cancel: bool = False
    # What the job leaves when it ends badly, and its cleanup endpoint (CLEANUP_MODES).
    leaves_resources: str = "none"
    cleanup_checks: int = 2

    def status_error_for(self, index: int) -> StatusError | None:
        """The scripted error for the ``index``-th (0-based) status call, if any."""
        for phase in self.status_errors:
            if index < phase.count:
                return phase
            index -= phase.count
        return None


def _int(raw: dict[str, Any], name: str, *, minimum: int = 0) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BehaviourError(f"behaviour.{name} must be an integer >= {minimum}")
    return value


def _float(raw: dict[str, Any], name: str) -> float | None:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise BehaviourError(f"behaviour.{name} must be a number >= 0")
    return float(value)


def _bool(raw: dict[str, Any], name: str, default: bool) -> bool:
    value = raw.get(name, default)
    if not isinstance(value, bool):
        raise BehaviourError(f"behaviour.{name} must be a boolean")
    return value


def _choice(raw: dict[str, Any], name: str, choices: tuple[str, ...]) -> str:
    value = raw.get(name, choices[0])
    if value not in choices:
        raise BehaviourError(f"behaviour.{name} must be one of {', '.join(choices)}")
    return str(value)


def _str(raw: dict[str, Any], name: str, default: str) -> str:
    value = raw.get(name, default)
    if not isinstance(value, str):
        raise BehaviourError(f"behaviour.{name} must be a string")
    return value


_STATUS_ERROR_KEYS = frozenset({"code", "count", "retry_after", "retry_after_date", "hold_seconds"})


def _status_error(raw: Any) -> StatusError:
    if not isinstance(raw, dict):
        raise BehaviourError("behaviour.status_errors entries must be objects")
    unknown = set(raw) - _STATUS_ERROR_KEYS
    if unknown:
        raise BehaviourError(f"behaviour.status_errors: unknown keys {sorted(unknown)}")
    code = raw.get("code")
    if isinstance(code, bool) or not (
        (isinstance(code, int) and 100 <= code <= 599) or code in ERROR_ACTIONS
    ):
        raise BehaviourError(
            'behaviour.status_errors.code must be an HTTP status, "drop", "hold" or "malformed"'
        )
    count = _int(raw, "count")
    hold = _float(raw, "hold_seconds")
    return StatusError(
        code=code,
        count=1 if count is None else count,
        retry_after=_int(raw, "retry_after"),
        retry_after_date=_int(raw, "retry_after_date"),
        hold_seconds=5.0 if hold is None else hold,
    )


_FIELDS = frozenset(
    {
        "polls_to_finish",
        "seconds_to_finish",
        "outcome",
        "error_code",
        "error_message",
        "progress",
        "progress_shape",
        "retry_after",
        "retry_after_date",
        "poll_hint",
        "create_response",
        "hold_seconds",
        "status_errors",
        "unauthorized_from",
        "unknown_state_at",
        "succeed_without_result",
        "expires_in_seconds",
        "run_past_expiry",
        "cancel",
        "result_items",
        "result_failed_items",
        "result_bad_checksum",
        "never_finish",
        "hostile_status",
        "hostile_from",
        "hostile_create",
        "hostile_result",
        "job_id_style",
        "create_retry_after",
        "deep_json_depth",
        "huge_bytes",
        "drip_interval_seconds",
        "foreign_origin",
        "in_flight_seconds",
        "require_repeatability",
        "synchronous",
        "result_shape",
        "result_digest",
        "result_altered",
        "result_lines",
        "result_line_bytes",
        "webhook",
        "result_url_expires_in",
        "result_url_expired_first",
        "result_single_use",
        "result_cut_after_bytes",
        "declared_failed_items",
        "partial_on_cancel",
        "leaves_resources",
        "cleanup_checks",
    }
)
# What a generated result cannot do: each needs the bytes in hand or a failed line.
_NOT_WITH_LINES = {
    "result_items": None,
    "result_failed_items": 0,
    "result_digest": "none",
    "result_altered": False,
    "hostile_result": "none",
}


def _result_lines(raw: dict[str, Any]) -> tuple[int | None, int]:
    """``result_lines`` and ``result_line_bytes``, checked against each other and against
    the knobs a generated result cannot honour."""
    lines = _int(raw, "result_lines", minimum=1)
    line_bytes = _int(raw, "result_line_bytes", minimum=1)
    if lines is None:
        if line_bytes is not None:
            raise BehaviourError("behaviour.result_line_bytes needs behaviour.result_lines")
        return None, Behaviour.result_line_bytes
    for name, neutral in _NOT_WITH_LINES.items():
        if raw.get(name, neutral) != neutral:
            raise BehaviourError(f"behaviour.result_lines cannot be combined with {name}")
    if raw.get("result_shape", "openai_jsonl") != "openai_jsonl":
        raise BehaviourError('behaviour.result_lines is the "openai_jsonl" result shape')
    line_bytes = Behaviour.result_line_bytes if line_bytes is None else line_bytes
    if line_bytes < min_line_bytes(lines):
        raise BehaviourError(
            f"behaviour.result_line_bytes must be at least {min_line_bytes(lines)} "
            f"for {lines} lines"
        )
    return lines, line_bytes


def parse_behaviour(raw: Any) -> Behaviour:
    """Parse ``body["behaviour"]`` (``None`` means all defaults)."""
    if raw is None:
        return Behaviour()
    if not isinstance(raw, dict):
        raise BehaviourError("behaviour must be an object")
    unknown = set(raw) - _FIELDS
    if unknown:
        raise BehaviourError(f"behaviour: unknown keys {sorted(unknown)}")
    errors_raw = raw.get("status_errors")
    if errors_raw is None:
        status_errors: tuple[StatusError, ...] = ()
    elif isinstance(errors_raw, list):
        status_errors = tuple(_status_error(item) for item in errors_raw)
    else:
        status_errors = (_status_error(errors_raw),)
    polls = _int(raw, "polls_to_finish", minimum=1)
    hold = _float(raw, "hold_seconds")
    items = _int(raw, "result_items")
    failed_items = _int(raw, "result_failed_items")
    hostile_from = _int(raw, "hostile_from", minimum=1)
    depth = _int(raw, "deep_json_depth", minimum=1)
    huge = _int(raw, "huge_bytes", minimum=1)
    drip = _float(raw, "drip_interval_seconds")
    lines, line_bytes = _result_lines(raw)
    if lines is not None:
        items, shape = lines, "openai_jsonl"
    else:
        shape = _choice(raw, "result_shape", RESULT_SHAPES)
    try:
        webhook = parse_webhook_option(raw.get("webhook"))
    except WebhookOptionError as exc:
        raise BehaviourError(str(exc)) from None
    url_expires_in = _int(raw, "result_url_expires_in", minimum=1)
    expired_first = _bool(raw, "result_url_expired_first", False)
    if expired_first and url_expires_in is None:
        raise BehaviourError("behaviour.result_url_expired_first needs result_url_expires_in")
    declared_failed = _int(raw, "declared_failed_items")
    if declared_failed is not None and shape != "openai_jsonl":
        raise BehaviourError('behaviour.declared_failed_items is the "openai_jsonl" shape')
    checks = _int(raw, "cleanup_checks")
    if raw.get("progress_shape", "steady") != "steady" and raw.get("seconds_to_finish") is None:
        raise BehaviourError("behaviour.progress_shape needs seconds_to_finish (a time-driven job)")
    return Behaviour(
        polls_to_finish=2 if polls is None else polls,
        seconds_to_finish=_float(raw, "seconds_to_finish"),
        outcome=_choice(raw, "outcome", OUTCOMES),
        error_code=_str(raw, "error_code", Behaviour.error_code),
        error_message=_str(raw, "error_message", Behaviour.error_message),
        progress=_bool(raw, "progress", True),
        progress_shape=_choice(raw, "progress_shape", PROGRESS_SHAPES),
        retry_after=_int(raw, "retry_after"),
        retry_after_date=_int(raw, "retry_after_date"),
        poll_hint=raw.get("poll_hint"),
        has_poll_hint="poll_hint" in raw,
        create_response=_choice(raw, "create_response", CREATE_RESPONSES),
        hold_seconds=5.0 if hold is None else hold,
        status_errors=status_errors,
        unauthorized_from=_int(raw, "unauthorized_from", minimum=1),
        unknown_state_at=_int(raw, "unknown_state_at", minimum=1),
        succeed_without_result=_bool(raw, "succeed_without_result", False),
        expires_in_seconds=_float(raw, "expires_in_seconds"),
        run_past_expiry=_bool(raw, "run_past_expiry", False),
        cancel=_choice(raw, "cancel", CANCEL_MODES),
        result_items=10 if items is None else items,
        result_failed_items=0 if failed_items is None else failed_items,
        result_bad_checksum=_bool(raw, "result_bad_checksum", False),
        never_finish=_bool(raw, "never_finish", False),
        hostile_status=_choice(raw, "hostile_status", HOSTILE_STATUS),
        hostile_from=1 if hostile_from is None else hostile_from,
        hostile_create=_choice(raw, "hostile_create", HOSTILE_CREATE),
        hostile_result=_choice(raw, "hostile_result", HOSTILE_RESULT),
        job_id_style=_choice(raw, "job_id_style", JOB_ID_STYLES),
        create_retry_after=_int(raw, "create_retry_after"),
        deep_json_depth=10_000 if depth is None else depth,
        huge_bytes=64 * 1024 * 1024 if huge is None else huge,
        drip_interval_seconds=1.0 if drip is None else drip,
        foreign_origin=_str(raw, "foreign_origin", Behaviour.foreign_origin).rstrip("/"),
        in_flight_seconds=_float(raw, "in_flight_seconds"),
        require_repeatability=_bool(raw, "require_repeatability", False),
        synchronous=_bool(raw, "synchronous", False),
        result_shape=shape,
        result_digest=_choice(raw, "result_digest", RESULT_DIGESTS),
        result_altered=_bool(raw, "result_altered", False),
        result_lines=lines,
        result_line_bytes=line_bytes,
        webhook=webhook,
        result_url_expires_in=url_expires_in,
        result_url_expired_first=expired_first,
        result_single_use=_bool(raw, "result_single_use", False),
        result_cut_after_bytes=_int(raw, "result_cut_after_bytes"),
        declared_failed_items=declared_failed,
        partial_on_cancel=_bool(raw, "partial_on_cancel", False),
        leaves_resources=_choice(raw, "leaves_resources", CLEANUP_MODES),
        cleanup_checks=2 if checks is None else checks,
    )
