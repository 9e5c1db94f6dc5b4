"""A sandbox job: its scripted behaviour, what its create answer carries, its public
status body, and the result document it serves."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote

from jobwarden.demo.sandbox import conventions, hostile
from jobwarden.demo.sandbox.behaviour import Behaviour
from jobwarden.demo.sandbox.replies import JSON_TYPE, Reply, error_reply, iso_utc

__all__ = [
    "FINAL_STATUSES",
    "Job",
    "build_result",
    "repeatability_problem",
    "result_document",
    "slipping_eta",
    "streamed_result",
    "time_driven_progress",
]

FINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "expired"})


@dataclass
class Job:
    id: str
    key: str
    canonical: str
    command: dict[str, Any]
    behaviour: Behaviour
    created_at: datetime
    created_mono: float
    create_body: bytes
    result_bytes: bytes
    result_sha256: str
    # A huge or a result_lines result, generated per download (result_bytes is then empty).
    result_stream: hostile.Generator | None = None
    result_length: int = 0
    create_requests: int = 1
    status_calls: int = 0  # normal status calls (scripted error calls excluded)
    error_calls: int = 0  # status calls consumed by status_errors
    cancel_requested: bool = False
    final: str | None = None
    last_status: str = "queued"
    last_progress: float = 0  # whole percents; four decimals for a time-driven job
    first_sent: str | None = None  # Repeatability-First-Sent of the first create
    notified: str = "queued"  # the status the last webhook announced
    late_event_sent: bool = False  # behaviour.webhook.out_of_order: sent once, after the result
    urls_issued: int = 0  # presigned result URLs handed out (behaviour.result_url_expires_in)
    link_used: bool = False  # behaviour.result_single_use: the one GET has been made
    # behaviour.leaves_resources: what an ended job left ("none", "present", "deleting",
    # "gone"), the cleanup calls received and the checks of a deletion under way.
    resources_deleting: bool = False
    resources_gone: bool = False
    cleanup_calls: int = 0
    resource_checks: int = 0

    @property
    def left_resources(self) -> bool:
        """Whether this job left resources behind that are not gone yet."""
        return (
            self.behaviour.leaves_resources != "none"
            and self.final in ("failed", "cancelled", "expired")
            and not self.resources_gone
        )

    @property
    def expires_at(self) -> datetime | None:
        seconds = self.behaviour.expires_in_seconds
        return None if seconds is None else self.created_at + timedelta(seconds=seconds)

    def create_headers(self) -> dict[str, str]:
        # Quoted: a hostile id must reach the client in the body, not split this header.
        headers = {"Content-Type": JSON_TYPE, "Location": f"/v1/jobs/{quote(self.id, safe='')}"}
        b = self.behaviour
        foreign = f"{b.foreign_origin}/v1/jobs/{self.id}"
        if b.hostile_create == "foreign_location":
            headers["Location"] = foreign
        elif b.hostile_create == "foreign_operation_location":
            headers["Operation-Location"] = foreign
        if b.create_retry_after is not None:
            headers["Retry-After"] = str(b.create_retry_after)
        return headers

    def create_fields(self) -> dict[str, Any]:
        """The create answer's fields, for a hostile mode that rewrites its body."""
        loaded = json.loads(self.create_body)
        return loaded if isinstance(loaded, dict) else {}

    def public(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "idempotency_key": self.key,
            "status": self.final or ("cancelling" if self.cancel_requested else self.last_status),
            "created_at": iso_utc(self.created_at),
            "command": self.command,
            "create_requests": self.create_requests,
            "status_calls": self.status_calls,
            "error_calls": self.error_calls,
            "cancel_requested": self.cancel_requested,
            "cleanup_calls": self.cleanup_calls,
            "resources": (
                "gone"
                if self.resources_gone
                else "deleting"
                if self.resources_deleting
                else "present"
                if self.left_resources
                else "none"
            ),
        }


def repeatability_problem(behaviour: Behaviour, key: str, first_sent: str | None) -> Reply | None:
    """OASIS Repeatable Requests 1.0 as Azure applies it: a GUID key, an IMF-fixdate."""
    if not behaviour.require_repeatability:
        return None
    try:
        uuid.UUID(key)
    except ValueError:
        return error_reply(400, "invalid_request_id", "Repeatability-Request-ID must be a GUID")
    try:
        parsed = parsedate_to_datetime(first_sent or "")
    except (TypeError, ValueError):
        parsed = None
    if parsed is None or not (first_sent or "").endswith("GMT"):
        return error_reply(
            400, "invalid_first_sent", "Repeatability-First-Sent must be an IMF-fixdate"
        )
    return None


def result_document(job_id: str, behaviour: Behaviour) -> dict[str, Any]:
    """`result_items` records in all, the last `result_failed_items` of them failed."""
    total = behaviour.result_items
    ok = max(0, total - behaviour.result_failed_items)
    items = [{"ref": f"item-{i}", "value": f"{job_id}:{i}"} for i in range(1, ok + 1)]
    failed = [
        {"ref": f"item-{i}", "error": "item rejected by the sandbox"}
        for i in range(ok + 1, total + 1)
    ]
    return {"record_count": total, "items": items, "failed_items": failed}


def build_result(job_id: str, behaviour: Behaviour, shape: dict[str, Any] | None = None) -> bytes:
    """The result bytes, held by the job; empty for a result_lines result (never held).
    ``shape``: a payment's or a deploy's facts (sandbox/shapes.py), beside the records."""
    b = behaviour
    if b.result_lines is not None:
        return b""
    shaped = conventions.result_body(b.result_shape, job_id, b.result_items, b.result_failed_items)
    if shaped is not None:
        return shaped[0]
    document = {**(shape or {}), **result_document(job_id, behaviour)}
    if behaviour.hostile_result == "deep_json":
        return hostile.dumps_with_deep(document, "nested", behaviour.deep_json_depth)
    if behaviour.hostile_result == "drip":
        return hostile.padded(json.dumps(document).encode())  # the checksum covers the padding
    return json.dumps(document).encode()


def streamed_result(behaviour: Behaviour) -> tuple[hostile.Generator, int, str] | None:
    """A result generated per download (its generator, length and sha256), or None.

    The sha256 takes one generating pass: seconds for gigabytes, so a caller computes it
    outside any lock.
    """
    b = behaviour
    if b.result_lines is not None:
        chunks = conventions.openai_lines(b.result_lines, b.result_line_bytes)
        return chunks, b.result_lines * b.result_line_bytes, hostile.digest(chunks)
    if b.hostile_result == "huge":
        return hostile.generated_result(b.result_items, b.huge_bytes)
    return None


def time_driven_progress(shape: str, fraction: float) -> float:
    """The percent a time-driven job reports after ``fraction`` of its time (four decimals,
    as fine as a percentComplete double or request counts of a large batch; never 100
    while it runs): see behaviour.PROGRESS_SHAPES."""
    if shape == "stall90":
        percent = min(90.0, 150.0 * fraction)
    elif shape == "front_loaded":
        percent = 300.0 * fraction if fraction < 0.2 else 60.0 + 50.0 * (fraction - 0.2)
    else:
        percent = 100.0 * fraction
    return max(0.0, min(99.9999, round(percent, 4)))


def slipping_eta(job: Job, status: str, mono_now: float) -> str | None:
    """behaviour.progress_shape "eta_slips": an ETA at 60 % of the time, slipping to the
    end (0.6 D + 0.4 t after creation), always early while the job runs; else None."""
    b = job.behaviour
    if b.progress_shape != "eta_slips" or status != "running" or not b.seconds_to_finish:
        return None
    eta = 0.6 * b.seconds_to_finish + 0.4 * (mono_now - job.created_mono)
    return iso_utc(job.created_at + timedelta(seconds=eta))
