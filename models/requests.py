"""Requests as the core builds them: URLs from the contract, never guessed.

``resolve_url`` is the one base-URL join; the base itself is resolved once per
process (``contract_loader.effective_base_url``) and carried in ``StepContext``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contract import JobLocator, ProviderContract, TokenPlacement
from jobwarden.models.operation import Operation
from jobwarden.models.pointers import resolve_pointer
from jobwarden.models.signals import RawResponse


def _identity(body: object) -> object:
    return body


@dataclass(frozen=True, slots=True, kw_only=True)
class StepContext:
    """What every decision needs besides the operation: built once per process."""

    contract: ProviderContract
    base_url: str
    # A provider plugin's status reshaping (pure provider code), else the body as is.
    status_body: Callable[[object], object] = field(default=_identity)


MAX_JOB_ID = 500  # the remote_job_id column; a longer id cannot be stored faithfully
# RFC 3986 pchar, plus "/" between segments (AIP-151 names are "operations/abc").
_SAFE_PATH = re.compile(r"[A-Za-z0-9._~!$&'()*+,;=:@/%-]+\Z")


def job_id_problem(contract: ProviderContract, job_id: str) -> str | None:
    """Why a provider's job id cannot be used, or None. Never the id itself unescaped."""
    if len(job_id) > MAX_JOB_ID:
        return f"job id longer than {MAX_JOB_ID} characters"
    if not job_id.isprintable() or not job_id.isascii() or " " in job_id:
        return f"job id with control, space or non-ASCII characters: {job_id[:80]!r}"
    templated = any(
        template is not None and "{job_id}" in template
        for template in (
            contract.status.path,
            contract.cancel.path if contract.cancel else None,
            contract.result.path if contract.result else None,
        )
    )
    if templated and (not _SAFE_PATH.match(job_id) or ".." in job_id or job_id.startswith("/")):
        return f"job id is not a safe URL path segment: {job_id[:80]!r}"
    return None


def resolve_url(base_url: str, path_or_url: str) -> str:
    """An absolute provider URL as given; a path (even `/v1/x:cancel`) joined onto the base."""
    if path_or_url.startswith(("http://", "https://")):
        return path_or_url
    return base_url.rstrip("/") + "/" + path_or_url.lstrip("/")


def provider_token(token_format: str, operation_id: uuid.UUID) -> str:
    """The operation's one token, made with its row: AIP-155 wants a UUID, others a prefix."""
    if token_format == "uuid":
        return str(uuid.uuid4())
    return f"jw-{operation_id.hex}"


def create_request(
    ctx: StepContext, op: Operation, first_sent: datetime | None = None
) -> ProviderRequest:
    """The create, carrying the operation's one provider token where the contract says.

    ``first_sent`` is the first attempt's time, sent in the contract's companion header
    (Repeatability-First-Sent) as an IMF-fixdate, the same on every retry.
    """
    spec = ctx.contract.create
    body: Any = dict(op.command)
    if spec.body_template == "wrapped":
        body = {"command": body}
    headers: dict[str, str] = {}
    if spec.token_placement is TokenPlacement.header:
        headers[spec.token_name] = op.provider_token
    else:
        body[spec.token_name] = op.provider_token
    sent = first_sent or op.first_sent_at
    if spec.first_sent_header and sent is not None:
        headers[spec.first_sent_header] = format_datetime(sent.astimezone(UTC), usegmt=True)
    return ProviderRequest(
        purpose=RequestPurpose.create,
        method=spec.method,
        url=resolve_url(ctx.base_url, spec.path),
        headers=headers,
        json_body=body,
    )


def lookup_request(ctx: StepContext, op: Operation, lookup_path: str) -> ProviderRequest:
    return ProviderRequest(
        purpose=RequestPurpose.lookup,
        method="GET",
        url=resolve_url(ctx.base_url, lookup_path.replace("{token}", op.provider_token)),
    )


def job_locator(contract: ProviderContract, raw: RawResponse) -> tuple[str | None, str | None]:
    """Job id and status URL exactly where the contract says; never a guessed URL."""
    obs = raw.observation
    job_id: str | None = None
    if contract.create.job_id_pointer is not None and isinstance(obs.body, dict):
        found = resolve_pointer(obs.body, contract.create.job_id_pointer)
        if isinstance(found, str | int) and not isinstance(found, bool) and str(found):
            job_id = str(found)
    status_url: str | None = None
    header = {
        JobLocator.location: "location",
        JobLocator.operation_location: "operation-location",
    }.get(contract.create.job_locator)
    if header is not None:
        status_url = obs.headers.get(header)
        if status_url and job_id is None:
            job_id = status_url
    elif job_id is not None and contract.status.path is not None:
        status_url = contract.status.path.replace("{job_id}", job_id)
    return job_id, status_url


def result_url(ctx: StepContext, op: Operation) -> str | None:
    spec = ctx.contract.result
    ref = op.result_reference
    if spec is None:
        return None
    if spec.fetch == "path" and spec.path:
        url = spec.path.replace("{job_id}", op.remote_job_id or "")
        return resolve_url(ctx.base_url, url.replace("{result_ref}", ref or ""))
    if ref is None:
        return None
    return resolve_url(ctx.base_url, ref)
