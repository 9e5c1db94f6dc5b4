"""Pinned contracts (DESIGN.md invariant 16): what ran is what was agreed.

An operation keeps the digest of the contract text it was created under, and the
text is kept by that digest (table ``provider_contracts``), so a contract edited
while operations run applies to new operations only: a running one is polled,
cancelled and collected under the text it started with, until a person moves it
(``jobwarden providers migrate``, a recorded decision).

Pure: digests, the parse of a kept text, and the report of which running operations
use which version. The digest is sha256 over the file's UTF-8 text exactly as read
(no normalisation: a changed byte is a changed contract). What a text refers to by
file name (a command schema, a plugin) is read from the provider's directory as it
is now; only the contract file itself is pinned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import FILE_FIELD, load_contract_text
from jobwarden.models.errors import ContractError

SHORT: Final = 12  # hex digits of a digest shown to people (as git shows a commit)


def contract_digest(text: str) -> str:
    """sha256 (hex) of a contract's text as its UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def short_digest(digest: str | None) -> str:
    """The digest as people read it; ``unpinned`` for an operation created before pinning."""
    return digest[:SHORT] if digest else "unpinned"


@dataclass(frozen=True, slots=True, kw_only=True)
class ContractVersion:
    """One contract text, its digest, and the contract it parses to."""

    provider: str
    digest: str
    text: str
    contract: ProviderContract


def read_version(path: Path) -> ContractVersion:
    """The contract file at ``path`` with its digest, parsed from the very text digested.

    Raises ContractError naming the file when it cannot be read or is invalid.
    """
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        problem = "not valid TOML: the file is not UTF-8"
        raise ContractError(str(path), FILE_FIELD, problem) from None
    except OSError as exc:
        raise ContractError(str(path), FILE_FIELD, f"cannot be read: {exc.strerror}") from None
    contract = load_contract_text(text, path)
    return ContractVersion(
        provider=contract.name, digest=contract_digest(text), text=text, contract=contract
    )


def current_versions(contracts: Mapping[str, ProviderContract]) -> dict[str, ContractVersion]:
    """Each loaded contract read again with its digest: the version new operations pin.

    Read again rather than digested beside the first parse so that the digest and the
    contract always come from one read (a file edited in between would otherwise pin a
    text that was never the one parsed).
    """
    versions = {name: read_version(Path(c.source_file)) for name, c in contracts.items()}
    for name, version in versions.items():
        if version.provider != name:
            raise ContractError(
                contracts[name].source_file, "name", "changed while the contracts were loaded"
            )
    return versions


def pinned_contract(provider: str, text: str, file: Path) -> ProviderContract:
    """A kept text parsed as the provider's contract, ``file`` resolving what it names.

    Raises ContractError when the text no longer parses (a field this version of
    jobwarden refuses) or names another provider.
    """
    contract = load_contract_text(text, file)
    if contract.name != provider:
        raise ContractError(str(file), "name", f"the kept text names {contract.name!r}")
    return contract


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionUse:
    """How many running operations of one provider use one contract version."""

    provider: str
    digest: str | None  # None: created before contracts were pinned (the current one)
    operations: int


def usage_lines(uses: Iterable[VersionUse], current: Mapping[str, str]) -> list[str]:
    """``providers check``'s report: per provider, per version, the running operations.

    ``current``: each configured provider's current digest. A provider whose running
    operations all use the current version says so in one line.
    """
    lines = []
    for use in sorted(uses, key=lambda u: (u.provider, u.digest or "")):
        now = current.get(use.provider)
        if use.digest is None:
            mark = "created before pinning: polled under the current contract"
        elif use.digest == now:
            mark = "current"
        elif now is None:
            mark = "provider no longer configured"
        else:
            mark = "older version (jobwarden providers migrate moves them)"
        lines.append(
            f"running {use.provider}  contract {short_digest(use.digest)}  "
            f"{use.operations} operation{'s' if use.operations != 1 else ''}  ({mark})"
        )
    return lines
