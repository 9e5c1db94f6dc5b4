"""Getting a result out: what a download says about the bytes, and which bytes it sends.

Pure: no I/O. The HTTP route (``api/results.py``), the CLI (``result_cli.py``) and the
operation view ask it the same questions, so every door labels a result alike.

- ``validated``: whether the bytes passed validation. A result row is the truth that bytes
  exist; the state says what they are: ``succeeded`` is ``True``, ``result_accepted`` (a
  person accepted a kept invalid result) is ``"accepted"``, and any other state holding a
  row (``result_validation_failed`` with its bytes kept) is ``False``. An unknown state is
  ``False`` too: a client must never mistake unvalidated bytes for a validated result.
- ``repr_digest``: RFC 9530 section 3 ``Repr-Digest``, a Structured Fields Dictionary
  (RFC 8941 section 3.2) whose ``sha-256`` member is a Byte Sequence (RFC 8941 section
  3.3.5: standard base64 with padding between colons). It covers the whole selected
  representation, so a 206 carries the same value as a 200.
- ``choose_range``: a single byte range per RFC 9110 section 14 (``bytes=a-b``, ``a-``,
  ``-n``), ``Unsatisfiable`` (answered 416), or None (send the whole). A malformed header,
  another unit or several ranges are ignored (section 14.2: a server MAY ignore Range),
  which costs a client that asked for several ranges the whole object, never an error.
  ``If-Range`` is honoured with the strong ETag only (section 13.1.5): we keep no
  Last-Modified, so a date never matches and the whole is sent.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from typing import Final, Literal

from jobwarden.models.states import OperationState as S

Validated = bool | Literal["accepted"]

# RFC 9110 section 14.1.2: byte-range-spec / suffix-range-spec, one of them, OWS allowed
# around the set's elements; digits only (no sign, no spaces inside a number).
_ONE_RANGE: Final = re.compile(r"bytes=[ \t]*(?:(\d+)-(\d*)|-(\d+))[ \t]*\Z", re.IGNORECASE)
# Header values we can send as they are: visible ASCII and spaces (no CR, LF or NUL).
_HEADER_SAFE: Final = re.compile(r"[\x20-\x7e]{1,200}\Z")
DEFAULT_CONTENT_TYPE: Final = "application/octet-stream"


@dataclass(frozen=True, slots=True, kw_only=True)
class ByteRange:
    """The bytes ``[start, end)`` of an object of ``size`` bytes (end exclusive)."""

    start: int
    end: int
    size: int

    @property
    def length(self) -> int:
        return self.end - self.start

    @property
    def content_range(self) -> str:
        # RFC 9110 section 14.4: last-pos is inclusive.
        return f"bytes {self.start}-{self.end - 1}/{self.size}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Unsatisfiable:
    """No byte of the range is in the object: 416 with ``Content-Range: bytes */size``."""

    size: int

    @property
    def content_range(self) -> str:
        return f"bytes */{self.size}"


def validated(state: str) -> Validated:
    """What a result's bytes are in ``state``: validated, accepted by a person, or not."""
    if state == S.succeeded.value:
        return True
    if state == S.result_accepted.value:
        return "accepted"
    return False


def validated_header(value: Validated) -> str:
    """``Jobwarden-Result-Validated``: ``true``, ``false`` or ``accepted``."""
    return value if isinstance(value, str) else str(value).lower()


def repr_digest(sha256_hex: str) -> str:
    """``sha-256=:<base64>:`` for a hex sha256 (RFC 9530 section 3)."""
    return "sha-256=:" + base64.b64encode(bytes.fromhex(sha256_hex)).decode("ascii") + ":"


def strong_etag(sha256_hex: str) -> str:
    """A strong entity tag (RFC 9110 section 8.8.3): the bytes' sha256, quoted."""
    return f'"{sha256_hex}"'


def content_type(stored: str | None) -> str:
    """The stored media type when it can be sent as a header, else octet-stream."""
    if stored is None or not _HEADER_SAFE.fullmatch(stored):
        return DEFAULT_CONTENT_TYPE
    return stored


def choose_range(
    range_header: str | None, if_range: str | None, size: int, etag: str
) -> ByteRange | Unsatisfiable | None:
    """The one range to send, ``Unsatisfiable``, or None for the whole object."""
    if range_header is None:
        return None
    if if_range is not None and if_range.strip() != etag:
        # A different or weak tag, or a date: the client's copy is another one (13.1.5).
        return None
    found = _ONE_RANGE.match(range_header.strip())
    if found is None:
        return None
    first, last, suffix = found.groups()
    if suffix is not None:
        # A suffix of n bytes: the last n, or the whole when n passes the size; -0 is
        # satisfiable by no byte (section 14.1.3).
        n = int(suffix)
        if n == 0 or size == 0:
            return Unsatisfiable(size=size)
        return ByteRange(start=max(0, size - n), end=size, size=size)
    start = int(first)
    if last and int(last) < start:
        return None  # last-pos before first-pos: invalid, so the header is ignored
    if start >= size:
        return Unsatisfiable(size=size)
    end = size if not last else min(int(last) + 1, size)
    return ByteRange(start=start, end=end, size=size)
