"""Immutable references: command fields that must name one exact commit, digest or hash.

A command schema marks a string property with ``"x-jobwarden-immutable-reference":
"<kind>"``. A deploy that says ``main`` or ``latest`` names whatever the branch or tag
points at when the provider reads it, so the fingerprint, the approval and a retry could
all agree on a command that deploys different code each time. A commit id or a digest
names exactly one thing, so what was fingerprinted and approved is what runs, and a
retry under the same key that changes the reference is a conflict (a new fingerprint).

The kinds (each a whole-string match: no whitespace, no trailing newline, lower case)::

    git_commit   40 hex digits (SHA-1 object name) or 64 (SHA-256 repositories)
    oci_digest   sha256:<64 hex>, or <repository>@sha256:<64 hex> (no tag beside it)
    sha256       64 hex digits

Pure: ``reference_problem`` runs in the command schema's own validation step
(``models.contracts.command_schema``), so a mutable name is an InvalidCommandError
naming the field, refused before anything is stored, like any other schema refusal.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "IMMUTABLE_REFERENCE",
    "ImmutableReference",
    "ReferenceKind",
    "reference_problem",
]

# The schema keyword: "x-" because JSON Schema leaves such names to applications.
IMMUTABLE_REFERENCE: Final = "x-jobwarden-immutable-reference"


class ReferenceKind(StrEnum):
    git_commit = "git_commit"  # a full commit id: 40 hex (SHA-1) or 64 hex (SHA-256)
    oci_digest = "oci_digest"  # an OCI content digest, optionally after a repository name
    sha256 = "sha256"  # a bare SHA-256 digest: 64 hex


_HEX64: Final = "[0-9a-f]{64}"
# A repository as the OCI distribution spec and docker's reference grammar spell it
# (lower case; a registry host may carry a port), then the digest; a tag is refused
# beside it: "app:latest@sha256:..." reads to an approver as if the tag mattered.
_COMPONENT: Final = "[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY: Final = rf"{_COMPONENT}(?::[0-9]{{1,5}})?(?:/{_COMPONENT})*"

_PATTERNS: Final[dict[ReferenceKind, re.Pattern[str]]] = {
    ReferenceKind.git_commit: re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}"),
    ReferenceKind.oci_digest: re.compile(rf"(?:{_REPOSITORY}@)?sha256:{_HEX64}"),
    ReferenceKind.sha256: re.compile(_HEX64),
}

# What the refusal says a reference of each kind looks like.
_EXPECTED: Final[dict[ReferenceKind, str]] = {
    ReferenceKind.git_commit: "a full commit id (40 or 64 lower-case hex digits)",
    ReferenceKind.oci_digest: (
        "an OCI digest (sha256:<64 lower-case hex>, or <repository>@sha256:<64 hex>)"
    ),
    ReferenceKind.sha256: "a SHA-256 digest (64 lower-case hex digits)",
}
_SHOWN_VALUE: Final = 80


def reference_problem(kind: ReferenceKind, value: str) -> str | None:
    """None when ``value`` is an immutable reference of ``kind``; else why it is refused."""
    if _PATTERNS[kind].fullmatch(value):
        return None
    shown = value if len(value) <= _SHOWN_VALUE else value[:_SHOWN_VALUE] + "..."
    return (
        f"{shown!r} is not an immutable reference: {kind.value} must be {_EXPECTED[kind]}; "
        "a branch, tag or short id can point at something else by the time it is used"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ImmutableReference:
    """One immutable reference in a command, as an approver is shown it."""

    path: tuple[str | int, ...]  # from the command's root: object keys and array indices
    value: str
    kind: ReferenceKind

    @property
    def pointer(self) -> str:
        """RFC 6901 JSON Pointer into the submission: ``/command/deploy/commit``."""
        tokens = (str(part).replace("~", "~0").replace("/", "~1") for part in self.path)
        return "/command" + "".join(f"/{token}" for token in tokens)
