"""Issuing receipts: read an operation's row and whole chain, sign them (the shell side).

The pure parts (assembling, verifying) are ``models/history/receipts.py``; here the
operations row and its events are read in one consistent view (archived events from
their segment first), the create is rendered as it leaves, and the document is signed
with the key ``JOBWARDEN_RECEIPT_SIGNING_KEY_FILE`` names. The CLI, the HTTP API and
the MCP tool all issue receipts through ``receipt_of``.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
)

from jobwarden.config.settings import Settings
from jobwarden.models.errors import GiveUpError, SettingsError
from jobwarden.models.history.chain import StoredEvent
from jobwarden.models.history.receipts import build_receipt, signed
from jobwarden.models.history.row_facts import ROW_FACTS
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.history_archive import archived_events
from jobwarden.tasks.provider.edge import shown_create_request
from jobwarden.tasks.runtime import Runtime

KEY_VARIABLE = "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE"
# A receipt that keeps meeting new writes between its reads gives up and says so.
_READS = 5


class ReceiptUnavailableError(GiveUpError):
    """The receipt cannot be issued now (its archived history cannot be read, or the
    operation keeps being written while it is read)."""


def signing_key(settings: Settings) -> Ed25519PrivateKey:
    """The receipt signing key; a SettingsError naming the variable when unset or not one."""
    configured = settings.receipt_signing_key
    if configured is None:
        raise SettingsError(f"{KEY_VARIABLE} is not set: receipts need an Ed25519 signing key")
    try:
        key = load_pem_private_key(configured.get_secret_value().encode(), password=None)
    except (ValueError, TypeError):
        # Never the exception's text: it could quote the key material.
        raise SettingsError(f"{KEY_VARIABLE}: not a PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise SettingsError(f"{KEY_VARIABLE}: not an Ed25519 key")
    return key


def public_key_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo).decode("ascii")


def _consistent_read(
    url: str, operation_id: uuid.UUID
) -> tuple[Operation, list[StoredEvent]] | None:
    """The row and its live events as of one write (re-read while a write lands between)."""
    for _ in range(_READS):
        with transaction(url) as session:
            row = store.load(session, operation_id)
            if row is None:
                return None
            events = store.stored_events(session, operation_id)
            again = store.load(session, operation_id)
        if again is not None and again.version == row.version:
            return row, events
    raise ReceiptUnavailableError(f"operation {operation_id} was written {_READS} times while read")


def receipt_of(
    settings: Settings, runtime: Runtime | None, operation_id: uuid.UUID, *, now: datetime
) -> dict[str, Any] | None:
    """The signed receipt of ``operation_id``; None when there is no such operation.

    The caller checks the tenant first (the HTTP and MCP doors). ``runtime`` renders the
    create as it leaves under the operation's pinned contract; None (or a contract no
    longer to be had) leaves ``create_request`` null. SettingsError without a key.
    """
    key = signing_key(settings)
    read = _consistent_read(settings.database_url, operation_id)
    if read is None:
        return None
    row, live = read
    archived: list[StoredEvent] = []
    if not live or live[0].seq != 1:
        _, archived, problems = archived_events(
            settings.database_url, settings.result_store, operation_id
        )
        if problems:
            raise ReceiptUnavailableError("; ".join(problems))
    shown = None
    if runtime is not None:
        ctx = runtime.found_context(row)
        shown = shown_create_request(ctx, row) if ctx is not None else None
    document = build_receipt(
        operation_id=str(operation_id),
        events=[*archived, *live],
        row={name: getattr(row, name) for name in ROW_FACTS},
        create_request=shown,
        issued_at=now,
    )
    return signed(document, key)
