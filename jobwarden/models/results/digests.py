"""Result integrity: every digest a provider sends with a result, checked against the bytes.

Pure. Every digest field a result answer carries is checked, whether or not the contract
names it: a provider that says what its bytes are has made a claim we can test, and a
result that contradicts it is not the result the job produced. The contract's ``digests``
says which fields must be there (``digests_required``), not which are read. Each convention
follows its public spec:

- RFC 9530 ``Repr-Digest`` / ``Content-Digest``: a Structured Fields Dictionary (RFC 8941)
  whose keys come from the IANA "Hash Algorithms for HTTP Digest Fields" registry and whose
  values are byte sequences, ``sha-256=:base64:``. A recipient may ignore members it does
  not know; a field that fails to parse is ignored as a whole (RFC 8941 section 4.2).
- RFC 1864 ``Content-MD5``: base64 of the 16 octets of the MD5 (RFC 1321) digest.
- Google Cloud Storage ``x-goog-hash``: ``crc32c=<base64>,md5=<base64>`` (often two header
  lines, joined by a comma); crc32c is Castagnoli (RFC 4960 appendix B), 4 octets big-endian.
- A digest in the status body, in the algorithm and encoding the contract names.

Every header convention covers the bytes as sent, content-coding included (RFC 9530
section 2 and 3, RFC 2616 section 14.15); the status body's digest covers the result as
stored. ``Digester`` hashes incrementally, so the edge can feed a body chunk by chunk.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, Protocol

import google_crc32c

from jobwarden.models.contracts.contract import (
    ChecksumAlgorithm,
    ChecksumEncoding,
    DigestField,
    ResultSpec,
)
from jobwarden.models.provider.pointers import Missing

__all__ = ["DigestCheck", "DigestReport", "Digester", "parse_dictionary"]

A = ChecksumAlgorithm
# Octets of each digest: a value of another length is malformed, never a mismatch.
_SIZES: Final = {A.sha256: 32, A.sha512: 64, A.md5: 16, A.crc32c: 4}
# RFC 9530 registry keys we can compute. sha-256 and sha-512 are "standard"; md5 and crc32c
# are "insecure" (fine against corruption, which is what a result download risks).
_RFC9530_KEYS: Final = {"sha-256": A.sha256, "sha-512": A.sha512, "md5": A.md5, "crc32c": A.crc32c}
_GOOG_KEYS: Final = {"crc32c": A.crc32c, "md5": A.md5}
_LABELS: Final = {
    DigestField.repr_digest: "Repr-Digest",
    DigestField.content_digest: "Content-Digest",
    DigestField.content_md5: "Content-MD5",
    DigestField.x_goog_hash: "x-goog-hash",
}
_BASE64: Final = re.compile(r"[A-Za-z0-9+/]*={0,2}\Z")


class _Hash(Protocol):
    def update(self, data: bytes, /) -> None: ...
    def digest(self) -> bytes: ...


def _new_hash(algorithm: ChecksumAlgorithm) -> _Hash:
    if algorithm is A.crc32c:
        # google_crc32c ships py.typed but leaves Checksum's __init__ unannotated.
        checksum: _Hash = google_crc32c.Checksum()  # type: ignore[no-untyped-call]
        return checksum
    if algorithm is A.md5:
        return hashlib.md5(usedforsecurity=False)
    return hashlib.new(algorithm.value)


class MalformedFieldError(ValueError):
    """A digest field that cannot be read; the field is then ignored as a whole."""


# --- RFC 8941 dictionaries ------------------------------------------------------------


class _Reader:
    """RFC 8941 section 4.2 parsing, just enough for a Dictionary of any member type."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def peek(self) -> str:
        return self.text[self.at : self.at + 1]

    def take(self, pattern: re.Pattern[str], what: str) -> str:
        found = pattern.match(self.text, self.at)
        if found is None:
            raise MalformedFieldError(f"expected {what} at character {self.at + 1}")
        self.at = found.end()
        return found.group()

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.at += 1

    def bare_item(self) -> object:
        first = self.peek()
        if first == ":":
            raw = self.take(re.compile(r":([A-Za-z0-9+/=]*):"), "a byte sequence")[1:-1]
            return _b64(raw)
        if first == '"':
            return self.take(re.compile(r'"(?:[ !#-\[\]-~]|\\["\\])*"'), "a string")
        if first == "?":
            return self.take(re.compile(r"\?[01]"), "a boolean") == "?1"
        if first == "-" or first.isdigit():
            return self.take(re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,3})?"), "a number")
        return self.take(re.compile(r"[A-Za-z*][!#$%&'*+\-.^_`|~0-9A-Za-z:/]*"), "an item")

    def parameters(self) -> None:
        while self.peek() == ";":
            self.at += 1
            self.skip(" ")
            self.take(_KEY, "a parameter key")
            if self.peek() == "=":
                self.at += 1
                self.bare_item()

    def member_value(self) -> object:
        if self.peek() != "(":
            value = self.bare_item()
            self.parameters()
            return value
        self.at += 1  # an inner list: no digest, but it must still parse
        while True:
            self.skip(" ")
            if self.peek() == ")":
                self.at += 1
                self.parameters()
                return None
            self.bare_item()
            self.parameters()
            if self.peek() not in (" ", ")"):
                raise MalformedFieldError(f"bad inner list at character {self.at + 1}")


_KEY: Final = re.compile(r"[a-z*][a-z0-9_\-.*]*")


def parse_dictionary(text: str) -> dict[str, object]:
    """An RFC 8941 Dictionary as key -> value (bytes for a byte sequence); raises when malformed.

    A later member with the same key replaces an earlier one, as section 4.2.2 says.
    """
    reader = _Reader(text)
    reader.skip(" ")
    members: dict[str, object] = {}
    while reader.peek():
        key = reader.take(_KEY, "a key")
        if reader.peek() == "=":
            reader.at += 1
            members[key] = reader.member_value()
        else:
            members[key] = True
            reader.parameters()
        reader.skip(" \t")
        if not reader.peek():
            return members
        reader.take(re.compile(","), "','")
        reader.skip(" \t")
        if not reader.peek():
            raise MalformedFieldError("trailing comma")
    return members  # an empty field is an empty Dictionary


def _b64(text: str) -> bytes:
    # RFC 8941 section 4.2.7: strict alphabet; padding is synthesised when missing.
    text = text.strip()
    if not _BASE64.match(text):
        raise MalformedFieldError("not base64")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except binascii.Error as exc:
        raise MalformedFieldError("not base64") from exc


# --- claims, checks and the report ----------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Claim:
    source: str  # "Repr-Digest", "status body /sha256", ...
    name: str  # the algorithm as that convention names it ("sha-256", "md5")
    algorithm: ChecksumAlgorithm
    value: bytes
    listed: bool = False  # from a field the contract's digests names (its requirement)
    hexadecimal: bool = False  # shown (and compared) as hex rather than base64
    sf_binary: bool = False  # shown as an RFC 8941 byte sequence, :base64:

    def show(self, digest: bytes) -> str:
        if self.hexadecimal:
            return digest.hex()
        text = base64.b64encode(digest).decode()
        return f":{text}:" if self.sf_binary else text


@dataclass(frozen=True, slots=True, kw_only=True)
class DigestCheck:
    """One digest compared: where it came from, the algorithm, ours and theirs (never bytes)."""

    source: str
    algorithm: str
    ours: str
    theirs: str
    matches: bool

    def summary(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "algorithm": self.algorithm,
            "ours": self.ours,
            "theirs": self.theirs,
            "matches": self.matches,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class DigestReport:
    checks: tuple[DigestCheck, ...] = ()
    notes: tuple[str, ...] = ()  # what was ignored, and why
    problem: str | None = None


def _sized(claim: _Claim) -> _Claim:
    if len(claim.value) != _SIZES[claim.algorithm]:
        size = _SIZES[claim.algorithm]
        raise MalformedFieldError(f"{claim.name} is {len(claim.value)} octets, not {size}")
    return claim


def _header_claims(field: DigestField, value: str) -> tuple[list[_Claim], list[str]]:
    """The digests one header field makes (not yet ``listed``), and the members ignored;
    raises when malformed."""
    source = _LABELS[field]
    claims: list[_Claim] = []
    ignored: list[str] = []
    if field is DigestField.content_md5:
        claims.append(_sized(_Claim(source=source, name="md5", algorithm=A.md5, value=_b64(value))))
    elif field is DigestField.x_goog_hash:
        seen: dict[str, bytes] = {}
        for part in value.split(","):
            name, sep, encoded = part.strip().partition("=")
            if not sep or not name:
                raise MalformedFieldError(f"{part.strip()!r} is not name=value")
            digest = _b64(encoded)
            if seen.get(name, digest) != digest:
                raise MalformedFieldError(f"two different {name} values")
            seen[name] = digest
        for name, digest in seen.items():
            algorithm = _GOOG_KEYS.get(name)
            if algorithm is None:
                ignored.append(name)
                continue
            claims.append(
                _sized(_Claim(source=source, name=name, algorithm=algorithm, value=digest))
            )
    else:
        for key, member in parse_dictionary(value).items():
            algorithm = _RFC9530_KEYS.get(key)
            if algorithm is None:
                ignored.append(key)
                continue
            if not isinstance(member, bytes):
                raise MalformedFieldError(f"{key} is not a byte sequence")
            claim = _Claim(
                source=source, name=key, algorithm=algorithm, value=member, sf_binary=True
            )
            claims.append(_sized(claim))
    return claims, ignored


def _coding(headers: Mapping[str, str]) -> str | None:
    coding = headers.get("content-encoding", "").strip().lower()
    return None if coding in ("", "identity") else coding


class Digester:
    """Hashes one result answer as it arrives, then checks every digest field it carries.

    Every field of ``DigestField`` that is present is checked, listed in the contract or
    not; one that does not parse is ignored and noted (RFC 8941 section 4.2, RFC 9530
    section 2). The contract's ``digests`` only adds a requirement: with
    ``digests_required``, at least one of those fields must give a usable digest.
    Built from the answer's headers (known before its body), so it hashes only the
    algorithms the answer claims. Feed it with ``update`` when the answer is not
    content-coded; for a content-coded answer feed the raw bytes to ``update_wire`` and
    the decoded ones to ``update``. Header digests cover the bytes as sent: when only the
    decoded bytes were fed, they are reported as not checkable rather than as a mismatch.
    """

    def __init__(self, spec: ResultSpec, headers: Mapping[str, str]) -> None:
        self._spec = spec
        self._coding = _coding(headers)
        self._claims: list[_Claim] = []
        # (listed, note): the requirement's problem quotes only the listed fields' notes.
        self._notes: list[tuple[bool, str]] = []
        # Decompressive transcoding: the hash is of the stored gzip object, not these bytes.
        transcoded = (
            headers.get("x-goog-stored-content-encoding", "").strip().lower() == "gzip"
            and self._coding != "gzip"
        )
        for field in DigestField:
            value = headers.get(field.value)
            label = _LABELS[field]
            listed = field in spec.digests
            if value is None:
                continue
            if field is DigestField.x_goog_hash and transcoded:
                note = f"{label} is of the stored gzip object, served decompressed"
                self._notes.append((listed, note))
                continue
            try:
                claims, ignored = _header_claims(field, value)
            except MalformedFieldError as exc:
                self._notes.append((listed, f"{label} ignored: malformed ({exc})"))
                continue
            self._claims += [replace(claim, listed=listed) for claim in claims]
            if ignored:
                note = f"{label} members not known here: {', '.join(ignored)}"
                self._notes.append((listed, note))
        wire = {claim.algorithm for claim in self._claims}
        stored = {spec.checksum_algorithm} if spec.checksum_pointer is not None else set()
        if self._coding is None:
            self._content = _Hashes(wire | stored)
            self._wire = self._content
        else:
            self._content, self._wire = _Hashes(stored), _Hashes(wire)
        self.size = 0

    def update(self, chunk: bytes) -> None:
        """The result's bytes as stored (for an answer without content-coding: as sent)."""
        self.size += len(chunk)
        self._content.update(chunk)

    def update_wire(self, chunk: bytes) -> None:
        """The bytes as sent, content-coding still applied (only for a content-coded answer)."""
        if self._wire is not self._content:
            self._wire.update(chunk)

    def report(self, promised: object) -> DigestReport:
        """Compare every digest; ``promised`` is the status body's value (MISSING or None: none).

        The problem, if any, is the first of: a mismatch, a missing or unreadable status
        body digest, or no usable header digest where the contract requires one.
        """
        checks: list[DigestCheck] = []
        notes = list(self._notes)
        listed_checked = False
        wire_seen = self._wire is self._content or self._wire.fed
        for claim in self._claims:
            if not wire_seen:
                note = (
                    f"{claim.source} {claim.name} covers the {self._coding}-coded bytes, "
                    "which were not kept"
                )
                notes.append((claim.listed, note))
                continue
            checks.append(_compare(claim, self._wire.digest(claim.algorithm)))
            listed_checked = listed_checked or claim.listed
        problem = self._promise(promised, checks)
        if any(not check.matches for check in checks):
            problem = "checksum mismatch"
        elif problem is None and self._spec.digests_required and not listed_checked:
            fields = " or ".join(_LABELS[f] for f in self._spec.digests)
            if fields:
                problem = f"the provider gave no usable digest in {fields}"
                quoted = [note for listed, note in notes if listed]
                problem += f" ({'; '.join(quoted)})" if quoted else ""
        shown = tuple(note for _, note in notes)
        return DigestReport(checks=tuple(checks), notes=shown, problem=problem)

    def _promise(self, promised: object, checks: list[DigestCheck]) -> str | None:
        spec = self._spec
        if spec.checksum_pointer is None:
            return None
        if promised is None or isinstance(promised, Missing):
            # The contract promises a checksum; its absence is a failed check, not a skipped one.
            return "the provider gave no checksum"
        algorithm, encoding = spec.checksum_algorithm, spec.checksum_encoding
        try:
            if not isinstance(promised, str):
                raise MalformedFieldError("not a string")
            if encoding is ChecksumEncoding.hex:
                value = bytes.fromhex(promised) if re.fullmatch(r"[0-9A-Fa-f]*", promised) else b""
            else:
                value = _b64(promised)
            claim = _sized(
                _Claim(
                    source=f"status body {spec.checksum_pointer}",
                    name=algorithm.value,
                    algorithm=algorithm,
                    value=value,
                    hexadecimal=encoding is ChecksumEncoding.hex,
                )
            )
        except (MalformedFieldError, ValueError):
            where = spec.checksum_pointer
            return f"the status body's checksum at {where} is not a {algorithm} {encoding} digest"
        checks.append(_compare(claim, self._content.digest(algorithm)))
        return None


def _compare(claim: _Claim, ours: bytes) -> DigestCheck:
    return DigestCheck(
        source=claim.source,
        algorithm=claim.name,
        ours=claim.show(ours),
        theirs=claim.show(claim.value),
        matches=ours == claim.value,
    )


class _Hashes:
    """One running hash per algorithm, fed once per chunk."""

    def __init__(self, algorithms: Iterable[ChecksumAlgorithm]) -> None:
        self._hashes = {algorithm: _new_hash(algorithm) for algorithm in algorithms}
        self.fed = False

    def update(self, chunk: bytes) -> None:
        self.fed = True
        for running in self._hashes.values():
            running.update(chunk)

    def digest(self, algorithm: ChecksumAlgorithm) -> bytes:
        return self._hashes[algorithm].digest()
