"""Where a result's bytes live and how to check them (invariant 14: an artifact, not a column).

Pure: no I/O. The shell (``tasks/results/store.py``) streams bytes through a
``StreamedDigest`` into the store named by ``JOBWARDEN_RESULT_STORE`` and returns a
``StoredObject``; the database keeps only that value.

- ``parse_store_url`` accepts ``file:///absolute/dir`` and ``s3://bucket[/prefix]``;
  anything else is a ``SettingsError`` naming the variable. Credentials never ride in
  the URL (they come from the ``AWS_*`` variables), so a URL with a user or password is
  refused without echoing it.
- ``object_key`` builds ``<tenant>/<operation>/<name>`` from segments of a small safe
  alphabet. A segment outside it (``..``, ``a/b``, ``%2e%2e``, spaces, non-ASCII) is
  replaced by ``_`` and a sha256 prefix of it: readable names stay readable, and no
  tenant string can climb out of its own prefix or land in another tenant's.
- ``StreamedDigest`` counts and hashes chunks as they pass and refuses past a bound,
  so nothing ever needs the whole body in memory.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote, unquote, urlsplit

from jobwarden.models.errors import ResultLocationError, ResultTooLargeError, SettingsError

STORE_VARIABLE = "JOBWARDEN_RESULT_STORE"
# A key segment as the store writes it. It never starts with '.', so '.' and '..' cannot
# be one, and holds no '%': a location is a URL, and whoever decodes it would turn '%2F'
# or '%2e%2e' into '/' or '..' (obstore itself writes '%' literally and refuses '..').
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_STORED_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
# S3's bucket naming rules (lower case, digits, '.', '-'; 3 to 63 characters).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_HASHED_HEX = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredObject:
    """A result as stored: where (a URL under the store), its sha256 (hex) and size."""

    location: str
    sha256: str
    size: int


@dataclass(frozen=True, slots=True, kw_only=True)
class StoreURL:
    """A parsed ``JOBWARDEN_RESULT_STORE``.

    ``root`` is the absolute directory (``file``) or the bucket (``s3``); ``prefix`` is
    the key prefix inside the bucket, without slashes at either end ('' for none, and
    always '' for ``file``).
    """

    scheme: Literal["file", "s3"]
    root: str
    prefix: str = ""

    @property
    def url(self) -> str:
        """The canonical URL, without a trailing slash; every location starts with it + '/'."""
        if self.scheme == "file":
            return "file://" + quote(self.root)
        return f"s3://{self.root}" + (f"/{self.prefix}" if self.prefix else "")

    def location(self, key: str) -> str:
        """The URL of ``key`` in this store."""
        return f"{self.url}/{check_key(key)}"

    def key_of(self, location: str) -> str:
        """The key of a location in this store; ``ResultLocationError`` for any other."""
        head = self.url + "/"
        if not location.startswith(head):
            raise ResultLocationError(location, f"not in the result store {self.url}")
        return check_key(location[len(head) :], location=location)


def check_key(key: str, *, location: str | None = None) -> str:
    """``key`` when every segment is of the safe alphabet; else ``ResultLocationError``."""
    if not all(_STORED_SEGMENT.fullmatch(part) for part in key.split("/")):
        raise ResultLocationError(location or key, "not a key this store writes")
    return key


def key_segment(text: str) -> str:
    """``text`` as one path segment: itself when safe, else ``_`` and a sha256 prefix."""
    if _PLAIN_SEGMENT.fullmatch(text):
        return text
    # '_' never starts a plain segment, so a hashed name cannot collide with a plain one.
    return "_" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASHED_HEX]


def object_key(tenant: str, operation_id: str, name: str = "result") -> str:
    """Where an operation's result goes: ``<tenant>/<operation_id>/<name>``, each made safe."""
    return "/".join(key_segment(part) for part in (tenant, operation_id, name))


def _refuse(problem: str) -> SettingsError:
    return SettingsError(f"{STORE_VARIABLE}: {problem}")


def parse_store_url(raw: str) -> StoreURL:
    """Parse ``file:///dir`` or ``s3://bucket[/prefix]``; ``SettingsError`` naming the variable."""
    forms = "expected file:///absolute/directory or s3://bucket[/prefix]"
    try:
        parts = urlsplit(raw.strip())
        has_credentials = parts.username is not None or parts.password is not None
    except ValueError as exc:
        raise _refuse(f"cannot parse it ({exc}); {forms}") from None
    if has_credentials:
        # Never echo it: the refused part is probably a secret.
        raise _refuse(
            "credentials do not belong in the URL; set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead"
        )
    if parts.query or parts.fragment:
        raise _refuse(f"{raw!r} has a query or fragment; {forms}")
    if parts.scheme == "file":
        return _file_store(raw, parts.netloc, unquote(parts.path), forms)
    if parts.scheme == "s3":
        return _s3_store(raw, parts.netloc, parts.path, forms)
    raise _refuse(f"{raw!r} is not a supported store URL; {forms}")


def _file_store(raw: str, host: str, path: str, forms: str) -> StoreURL:
    if host not in {"", "localhost"}:
        raise _refuse(f"{raw!r} names a host; a file store is a local directory; {forms}")
    if not path.startswith("/"):
        raise _refuse(f"{raw!r} has no absolute directory; {forms}")
    parts = [p for p in path.split("/") if p]
    if any(p in {".", ".."} for p in parts):
        raise _refuse(f"{raw!r} has '.' or '..' in its directory")
    return StoreURL(scheme="file", root="/" + "/".join(parts))


def _s3_store(raw: str, bucket: str, path: str, forms: str) -> StoreURL:
    if not _BUCKET.fullmatch(bucket):
        raise _refuse(f"{raw!r}: {bucket!r} is not an S3 bucket name; {forms}")
    prefix = path.strip("/")
    if prefix and not all(_STORED_SEGMENT.fullmatch(p) for p in prefix.split("/")):
        raise _refuse(f"{raw!r}: each prefix segment must be of A-Z a-z 0-9 . _ -")
    return StoreURL(scheme="s3", root=bucket, prefix=prefix)


class StreamedDigest:
    """sha256 and size of the bytes seen so far, refusing past ``max_bytes``.

    Mutable on purpose: it is the running state of one stream, owned by one call and
    turned into a frozen ``StoredObject`` at the end.
    """

    __slots__ = ("_hash", "max_bytes", "size")

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, not {max_bytes}")
        self.max_bytes = max_bytes
        self.size = 0
        self._hash = hashlib.sha256()

    def add(self, chunk: bytes) -> None:
        """Count and hash ``chunk``; ``ResultTooLargeError`` if the total passes the bound."""
        if self.size + len(chunk) > self.max_bytes:
            raise ResultTooLargeError(self.max_bytes)
        self.size += len(chunk)
        self._hash.update(chunk)

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def stored_at(self, location: str) -> StoredObject:
        return StoredObject(location=location, sha256=self.sha256, size=self.size)

    def through(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """Yield each non-empty chunk after adding it; refuses before yielding one too many."""
        for chunk in chunks:
            if chunk:
                self.add(chunk)
                yield chunk


def mismatch(expected: StoredObject, *, size: int | None, sha256: str | None) -> str | None:
    """What is wrong with the object found at ``expected.location``, or None when it matches.

    ``size`` None: nothing is there; ``sha256`` None: the bytes were not re-read (the size
    already differs).
    """
    where = expected.location
    if size is None:
        return f"{where}: missing"
    if size != expected.size:
        return f"{where}: size {size}, expected {expected.size}"
    if sha256 is not None and sha256 != expected.sha256:
        return f"{where}: sha256 {sha256}, expected {expected.sha256}"
    return None
