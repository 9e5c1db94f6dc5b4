"""Requests as the core builds them: URLs from the contract, never guessed.

``resolve_url`` is the one base-URL join; the base itself is resolved once per
process (``contract_loader.effective_base_url``) and carried in ``StepContext``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contracts.contract import JobLocator, ProviderContract, TokenPlacement
from jobwarden.models.contracts.routes import choose_route, fill_path, place_job_id, request_body
from jobwarden.models.operation import Operation
from jobwarden.models.provider.pointers import resolve_pointer
from jobwarden.models.provider.signals import RawResponse


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


def job_id_problem(contract: ProviderContract, job_id: str) -> str | None:
    """Why a provider's job id cannot be used, or None. Never the id itself unescaped.

    Where a path template places the id (``{job_id}``) it is encoded segment by segment
    (``routes.place_job_id``): an ARM resource id keeps its ``/``, and only an empty, ``.``
    or ``..`` segment, which would change where the path points, is refused.
    """
    if len(job_id) > MAX_JOB_ID:
        return f"job id longer than {MAX_JOB_ID} characters"
    if not job_id.isprintable() or not job_id.isascii() or " " in job_id:
        return f"job id with control, space or non-ASCII characters: {job_id[:80]!r}"
    for template in (
        contract.status.path,
        contract.cancel.path if contract.cancel else None,
        contract.cleanup.path if contract.cleanup else None,
        contract.cleanup.check_path if contract.cleanup else None,
        contract.result.path if contract.result else None,
    ):
        placed = place_job_id(template, job_id) if template and "{job_id}" in template else ""
        if placed is None:
            return f"job id has an empty, '.' or '..' path segment: {job_id[:80]!r}"
    return None


def job_path(template: str, job_id: str) -> str:
    """``template`` with the id placed (``job_id_problem`` refused an id that cannot be)."""
    return place_job_id(template, job_id) or template.replace("{job_id}", "")


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
    route = choose_route(spec, op.command)
    has_body, body = request_body(route, op.command)
    if has_body and spec.body_template == "wrapped":
        body = {"command": body}
    headers: dict[str, str] = {}
    if spec.token_placement is TokenPlacement.header:
        headers[spec.token_name] = op.provider_token
    elif isinstance(body, dict):
        body = {**body, spec.token_name: op.provider_token}
    sent = first_sent or op.first_sent_at
    if spec.first_sent_header and sent is not None:
        headers[spec.first_sent_header] = format_datetime(sent.astimezone(UTC), usegmt=True)
    return ProviderRequest(
        purpose=RequestPurpose.create,
        method=route.method,
        url=create_url(ctx, op.command),
        headers=headers,
        json_body=body if has_body else None,
    )


def create_url(ctx: StepContext, command: Mapping[str, Any]) -> str:
    """The create's absolute URL: its route's path filled from the command. Under an Azure
    convention this is also the "original URI" a PUT's final state is read from."""
    route = choose_route(ctx.contract.create, command)
    return resolve_url(ctx.base_url, fill_path(route.path, command))


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
        status_url = job_path(contract.status.path, job_id)
    return job_id, status_url


def result_url(ctx: StepContext, op: Operation) -> str | None:
    spec = ctx.contract.result
    ref = op.result_reference
    if spec is None:
        return None
    if spec.fetch == "path" and spec.path:
        url = job_path(spec.path, op.remote_job_id or "")
        return resolve_url(ctx.base_url, url.replace("{result_ref}", ref or ""))
    if ref is None:
        return None
    return resolve_url(ctx.base_url, ref)
