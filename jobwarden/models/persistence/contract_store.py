"""SQL for pinned contracts (0026): texts kept by digest, and who runs under which.

Helpers take the session and never commit. The intake keeps a text in its claim
statement (intake_store.insert); these serve the rest: a worker reading a text it has
not parsed yet, a move to the current contract, and ``providers check``'s report.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import cast

from sqlalchemy import Table, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from jobwarden.models.contracts.pins import VersionUse
from jobwarden.models.persistence.tables import OperationRow, ProviderContractRow
from jobwarden.models.states import TERMINAL

CONTRACTS = cast(Table, ProviderContractRow.__table__)
OPERATIONS = cast(Table, OperationRow.__table__)
_ENDED = sorted(s.value for s in TERMINAL)


def text_of(session: Session, digest: str) -> str | None:
    """The kept text with this digest, or None when none is kept."""
    found = session.scalar(select(CONTRACTS.c.text).where(CONTRACTS.c.digest == digest))
    return cast(str | None, found)


def keep(session: Session, *, digest: str, provider: str, text: str, now: datetime) -> None:
    """Keep a contract text by its digest; a text already kept stays as it was."""
    session.execute(
        pg_insert(CONTRACTS)
        .values(digest=digest, provider=provider, text=text, first_seen=now)
        .on_conflict_do_nothing(index_elements=["digest"])
    )


def version_uses(session: Session) -> list[VersionUse]:
    """Per provider and contract digest, how many operations have not ended.

    A scan of the operations not yet ended: an operator's report, never on a step's path.
    """
    rows = session.execute(
        select(OPERATIONS.c.provider, OPERATIONS.c.contract_digest, func.count())
        .where(OPERATIONS.c.state.not_in(_ENDED))
        .group_by(OPERATIONS.c.provider, OPERATIONS.c.contract_digest)
    )
    return [VersionUse(provider=p, digest=d, operations=n) for p, d, n in rows]


def not_under(
    session: Session,
    provider: str,
    digest: str,
    operation_id: uuid.UUID | None = None,
    tenant: str | None = None,
) -> list[uuid.UUID]:
    """The provider's operations not yet ended whose contract is not ``digest`` (all of
    them, or just ``operation_id``; only ``tenant``'s when given), oldest first."""
    query = (
        select(OPERATIONS.c.operation_id)
        .where(OPERATIONS.c.provider == provider)
        .where(OPERATIONS.c.state.not_in(_ENDED))
        .where(OPERATIONS.c.contract_digest.is_distinct_from(digest))
        .order_by(OPERATIONS.c.created_at, OPERATIONS.c.operation_id)
    )
    if operation_id is not None:
        query = query.where(OPERATIONS.c.operation_id == operation_id)
    if tenant is not None:
        query = query.where(OPERATIONS.c.tenant == tenant)
    return list(session.scalars(query))
