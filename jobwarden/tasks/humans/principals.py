"""Token principals without the HTTP door: every door's lookup (issue 33).

A token is ``jw_`` + secrets.token_urlsafe(32) (256 random bits). Only its sha256 is
stored: for a secret of that entropy a fast hash is enough (nothing to brute force,
unlike a password), and it keeps the lookup one indexed equality.

The API, the console, the MCP server and the CLI resolve a token here (``principal_of``),
so the CLI acts as the same principal with the same scopes as the API would, without the
``[api]`` extra. jobwarden/api/auth.py re-exports these names for its routes.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from jobwarden.models.humans.identity import Author, token_author
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.api_store import TokenRecord
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.tasks.runtime import utcnow

TOKEN_PREFIX = "jw_"
# A use is recorded at most this often per token, so reading is not a write per request.
LAST_USE_RESOLUTION = timedelta(minutes=1)


class Scope(StrEnum):
    submit = "submit"  # POST /v1/operations
    read = "read"  # GET operations, events, escalations
    cancel = "cancel"  # POST /v1/operations/{id}/cancel
    approve = "approve"  # POST /v1/operations/{id}/approvals
    decide = "decide"  # POST /v1/operations/{id}/decisions
    pause = "pause"  # pause and resume the token's own operations, and its tenant's share
    operate = "operate"  # pause and resume a provider for every tenant (an operator's)


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """The authenticated caller: a token of one tenant with its scopes."""

    tenant: str
    token_id: uuid.UUID
    name: str
    scopes: frozenset[Scope]
    # The tenant's setting: may a token approve an operation its own name submitted?
    allows_self_approval: bool = False

    @property
    def actor(self) -> str:
        """The actor in events and the intake log."""
        return self.author.actor

    @property
    def author(self) -> Author:
        """The principal as the author of a decision (every door hands this to the core)."""
        return token_author(
            self.name, token_id=self.token_id, allows_self_approval=self.allows_self_approval
        )


def principal_from(record: TokenRecord) -> Principal:
    """The principal a live token record names (scopes this version does not know are dropped).

    The caller has checked that the token exists and is not revoked.
    """
    return Principal(
        tenant=record.tenant,
        token_id=record.token_id,
        name=record.name,
        scopes=frozenset(Scope(s) for s in record.scopes if s in Scope.__members__),
        allows_self_approval=record.allows_self_approval,
    )


def secret_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def principal_of(url: str, token: str) -> Principal | None:
    """The principal of a live token, or None for an unknown or revoked one (every door's lookup).

    A use is recorded at most once per LAST_USE_RESOLUTION.
    """
    digest = secret_hash(token)
    with snapshot(url) as session:
        record = api_store.token_by_hash(session, digest)
    if record is None or record.revoked_at is not None:
        return None
    now = utcnow()
    cutoff = now - LAST_USE_RESOLUTION
    if record.last_used_at is None or record.last_used_at <= cutoff:
        with transaction(url) as session:
            api_store.touch_token(session, record.token_id, now=now, unless_after=cutoff)
    return principal_from(record)
