"""Who made a decision: one identity model for every door (DESIGN invariant 15, issue 33).

Every door hands the core an ``Author``, never a typed name it trusts:

- ``token``: an authenticated principal — an API or MCP token, a console session (it
  holds a token's hash), or the CLI acting with a token (``JOBWARDEN_TOKEN`` /
  ``--token-file``). Its actor is ``token:<name>``; the token's name is the person, so
  two tokens with one name are one principal (a person holding two tokens is still
  one pair of eyes).
- ``break-glass``: a database operator acting without a token, with a stated reason;
  actor ``break-glass:<os user>``. Recorded as such and never counted toward a
  two-person rule.
- ``named``: a name the Python door's caller vouches for (the embedding program holds
  the database credential, so it is trusted as much as a database operator). Kept for
  the Python API's existing callers; like break-glass it never counts toward a
  two-person rule, and a name spelt like a principal (``token:…``) is refused, so no
  text can pass for a token.

Identity comparison is by principal name, across kinds and across how a door wrote it
(``alice``, ``token:alice``, ``human:token:alice``): conservative, it can only refuse
more (a break-glass ``alice`` is still the submitter ``alice``). Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from jobwarden.models.errors import RefusedInputError

# How people's acts are prefixed in the history (tasks/humans/interventions.py writes it).
HUMAN = "human:"
# A break-glass reason is stored in events and logs: bounded like a cancel reason.
MAX_REASON = 500


class AuthorKind(StrEnum):
    token = "token"  # an authenticated principal (API/MCP token, console session, CLI token)
    break_glass = "break-glass"  # a database operator without a token, with a reason
    named = "named"  # a name the Python door's caller vouches for; unauthenticated


# Actor prefixes a principal's kind writes; a "named" author may not spell one.
_PREFIXES = (f"{AuthorKind.token.value}:", f"{AuthorKind.break_glass.value}:")


@dataclass(frozen=True, slots=True, kw_only=True)
class Author:
    """The author of a decision, as a door authenticated it (or broke glass)."""

    kind: AuthorKind
    name: str
    token_id: uuid.UUID | None = None
    reason: str | None = None  # break-glass: why there was no token
    # The token's tenant setting: may it approve what its own name submitted (one approval)?
    allows_self_approval: bool = False

    @property
    def actor(self) -> str:
        """The actor in events, the intake log and schedule actions."""
        return self.name if self.kind is AuthorKind.named else f"{self.kind.value}:{self.name}"

    @property
    def authenticated(self) -> bool:
        """Only an authenticated principal counts toward a two-person rule."""
        return self.kind is AuthorKind.token

    def excerpt(self) -> dict[str, Any]:
        """What an event records about its author beyond the actor column."""
        out: dict[str, Any] = {"principal": self.kind.value}
        if self.token_id is not None:
            out["token_id"] = str(self.token_id)
        if self.kind is AuthorKind.break_glass:
            out["break_glass"] = self.reason
        return out


def token_author(
    name: str, *, token_id: uuid.UUID | None = None, allows_self_approval: bool = False
) -> Author:
    """The author of an authenticated token (api/auth.py ``Principal.author`` builds it)."""
    return Author(
        kind=AuthorKind.token,
        name=name,
        token_id=token_id,
        allows_self_approval=allows_self_approval,
    )


def break_glass(user: str, reason: str) -> Author:
    """A break-glass author; RefusedInputError naming the field for an empty reason or user."""
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON or not reason.isprintable():
        raise RefusedInputError(
            f"--break-glass: give the reason, 1 to {MAX_REASON} printable characters"
        )
    if not user or not user.isprintable():
        raise RefusedInputError("break-glass: the operating-system user is unknown")
    return Author(kind=AuthorKind.break_glass, name=user, reason=reason)


def as_author(who: Author | str, field: str = "approver") -> Author:
    """The Python door's argument as an author: an Author as is; a name as ``named``.

    RefusedInputError naming ``field`` for an empty name or one spelt as a principal
    (``token:bob``, ``break-glass:root``): text never passes for an authenticated token.
    """
    if isinstance(who, Author):
        return who
    if not who.strip():
        raise RefusedInputError(f"{field}: name who decides")
    if who.startswith(_PREFIXES):
        raise RefusedInputError(
            f"{field}: {who!r} is spelt as a principal; pass the token's Author "
            "(jobwarden.models.humans.identity.token_author) or break_glass(user, reason)"
        )
    return Author(kind=AuthorKind.named, name=who)


def principal_name(actor: str) -> str:
    """The person a recorded actor names, however a door wrote it."""
    name = actor.removeprefix(HUMAN)
    for prefix in _PREFIXES:
        name = name.removeprefix(prefix)
    return name


def same_principal(a: str, b: str) -> bool:
    return principal_name(a) == principal_name(b)


def recorded_author(actor: str, excerpt: Mapping[str, Any]) -> Author:
    """The author an approval event recorded. Events written before this model carry no
    ``principal``: a ``token:`` actor came from an authenticated door (HTTP, MCP,
    console); any other name was typed, and is ``named``."""
    kind = excerpt.get("principal")
    if kind not in {k.value for k in AuthorKind}:
        kind = (
            AuthorKind.token.value
            if actor.startswith(_PREFIXES[0])
            else AuthorKind.break_glass.value
            if actor.startswith(_PREFIXES[1])
            else AuthorKind.named.value
        )
    return Author(kind=AuthorKind(kind), name=principal_name(actor))
