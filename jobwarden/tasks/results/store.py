"""The result store: result bytes streamed into a durable object, with their digest.

The only module that imports obstore (the Python binding of the Rust ``object_store``
crate). One URL, ``JOBWARDEN_RESULT_STORE``, picks the backend (parsed and checked by
``models.results.objects.parse_store_url``):

- ``file:///dir``: obstore's ``LocalStore`` (``mkdir=True`` makes the directory).
- ``s3://bucket[/prefix]``: obstore's ``S3Store``, with credentials and endpoint from
  the standard variables, read from ``environ`` and never from the URL nor logged:
  ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_REGION``,
  ``AWS_ENDPOINT_URL`` and ``AWS_ALLOW_HTTP`` (``true`` for a plain-HTTP endpoint).
  obstore's constructors also read the process's own ``AWS_*`` environment; the values
  passed here override those.

The store classes are built directly rather than through ``obstore.store.from_url``: the
URL is already parsed by the pure core, and obstore's docs recommend the per-store
constructors for static typing. What is used, from obstore's API reference (0.12):

- ``obstore.put(store, path, iterator, use_multipart=True, chunk_size=...,
  max_concurrency=...)``: "atomic, it will either successfully write the entirety of
  file to location, or fail. No clients should be able to observe a partially written
  object"; an iterator is sent as a multipart upload of ``chunk_size`` parts, at most
  ``max_concurrency`` in flight. When the iterator raises, obstore aborts the multipart
  upload and re-raises that same exception; ``LocalStore`` writes parts to a staging
  file beside the key and renames it only on completion (both pinned by
  tests/integration/test_result_store.py).
- ``obstore.get(store, path, options={"range": ...}).stream(min_chunk_size=...)``: a
  streamed (ranged) read; ``obstore.head`` for the size; ``obstore.delete``.
- ``S3Store(bucket, prefix=..., config={endpoint, region, access_key_id,
  secret_access_key, session_token}, client_options={allow_http, timeout,
  connect_timeout}, retry_config={max_retries, retry_timeout, backoff})``.

Failures, grouped by what the caller does: the store down or refusing is
``ResultStoreUnavailableError`` (retry later, counted against the budget); past
``max_bytes`` is ``ResultTooLargeError`` (give up); an exception from the source
itself (the provider's stream) is re-raised unchanged. In every one of these cases no
object is recorded at the key.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import obstore
from obstore.exceptions import BaseError as ObstoreError
from obstore.exceptions import NotFoundError, PreconditionError
from obstore.store import LocalStore, S3Store

from jobwarden.models.errors import (
    ResultChangedError,
    ResultMissingError,
    ResultStoreUnavailableError,
    SettingsError,
)
from jobwarden.models.results.objects import (
    STORE_VARIABLE,
    StoredObject,
    StoreURL,
    StreamedDigest,
    mismatch,
    parse_store_url,
)

if TYPE_CHECKING:
    from obstore import GetOptions
    from obstore.store import ClientConfig, ObjectStore, RetryConfig, S3Config

# S3's minimum part size is 5 MiB; 8 MiB parts with at most 2 in flight bound an upload's
# buffers whatever the result's size (scripts/bench_result_store.py: under 15 MiB of RSS
# growth for 1 GiB), at a throughput far above what a provider's stream delivers.
PART_BYTES = 8 * 1024 * 1024
PARTS_IN_FLIGHT = 2
READ_CHUNK_BYTES = 1024 * 1024
# LocalStore answers a missing file with the builtin FileNotFoundError, S3 with obstore's.
_NOT_FOUND = (NotFoundError, FileNotFoundError)
_STORE_ERRORS = (ObstoreError, OSError)
_TRUE = {"1", "true", "yes", "on"}


class _Source:
    """The caller's chunks, remembering an exception they raised (not the store's)."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self.failure: BaseException | None = None

    def __iter__(self) -> _Source:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            raise
        except BaseException as exc:
            self.failure = exc
            raise


def _reason(exc: BaseException) -> str:
    # obstore's messages carry a multi-line debug dump after the first line.
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


@dataclass(frozen=True, slots=True, kw_only=True)
class ObjectDigest:
    """What one streamed read of an object found: its store tag (the ETag S3 or the
    directory store gives it; None when the store gives none), its size and sha256."""

    tag: str | None
    size: int
    sha256: str


class ResultStore:
    """One result store (a directory or an S3 bucket prefix), safe to share in a process."""

    def __init__(self, url: StoreURL, store: ObjectStore) -> None:
        self.url = url
        self._store = store

    @classmethod
    def from_url(
        cls,
        url: str,
        environ: Mapping[str, str] = os.environ,
        *,
        timeout_seconds: float = 60.0,
        max_retries: int = 3,
    ) -> ResultStore:
        """Open the store ``url`` names; ``SettingsError`` naming the variable if it cannot.

        ``timeout_seconds`` bounds each request to S3 (one part, one read); obstore retries
        a failed request ``max_retries`` times within that long before the call fails.
        """
        parsed = parse_store_url(url)
        if parsed.scheme == "file":
            try:
                return cls(parsed, LocalStore(parsed.root, mkdir=True))
            except _STORE_ERRORS as exc:
                raise SettingsError(
                    f"{STORE_VARIABLE}: cannot use {parsed.root}: {_reason(exc)}"
                ) from None
        timeout = timedelta(seconds=timeout_seconds)
        client: ClientConfig = {
            "allow_http": environ.get("AWS_ALLOW_HTTP", "").lower() in _TRUE,
            "timeout": timeout,
            "connect_timeout": min(timeout, timedelta(seconds=5)),
        }
        retry: RetryConfig = {
            "max_retries": max_retries,
            "retry_timeout": timeout,
            "backoff": {
                "init_backoff": timedelta(milliseconds=100),
                "max_backoff": timedelta(seconds=5),
                "base": 2,
            },
        }
        store = S3Store(
            parsed.root,
            prefix=parsed.prefix or None,
            config=_s3_config(environ),
            client_options=client,
            retry_config=retry,
        )
        return cls(parsed, store)

    def put_stream(self, key: str, chunks: Iterable[bytes], *, max_bytes: int) -> StoredObject:
        """Stream ``chunks`` to ``key``; return where they are, their sha256 and size.

        The digest and size are computed as the chunks pass; memory holds about one chunk
        plus the parts in flight. Past ``max_bytes`` the upload is aborted and
        ``ResultTooLargeError`` raised; a store that fails raises
        ``ResultStoreUnavailableError``; an exception from ``chunks`` propagates as it
        is. In each case nothing is left at ``key`` (an existing object there is kept).
        """
        location = self.url.location(key)
        digest = StreamedDigest(max_bytes)
        source = _Source(digest.through(chunks))
        try:
            obstore.put(
                self._store,
                key,
                source,
                use_multipart=True,
                chunk_size=PART_BYTES,
                max_concurrency=PARTS_IN_FLIGHT,
            )
        except BaseException as exc:
            if source.failure is not None:
                # The source's own error (too large, the provider's stream broke): the
                # upload was aborted; the caller decides what it means.
                raise source.failure from None
            if isinstance(exc, _STORE_ERRORS):
                raise ResultStoreUnavailableError(
                    f"result store {self.url.url}: put {key}: {_reason(exc)}"
                ) from exc
            raise
        return digest.stored_at(location)

    def read(
        self,
        location: str,
        start: int | None = None,
        end: int | None = None,
        *,
        if_match: str | None = None,
    ) -> Iterator[bytes]:
        """The bytes at ``location`` (``[start, end)`` when given), streamed in chunks.

        The request is made now: ``ResultMissingError`` if nothing is there,
        ``ResultStoreUnavailableError`` if the store fails (now or while iterating);
        ``ResultLocationError`` for a location outside this store. An ``end`` past the
        object's end reads to its end. ``if_match``: the store tag a check read
        (``digest``); an object with another one raises ``ResultChangedError``.
        """
        key = self.url.key_of(location)
        lo = start or 0
        if lo < 0 or (end is not None and end < 0):
            raise ValueError(f"a byte range starts and ends at >= 0, not {start}:{end}")
        options: GetOptions = {}
        if if_match is not None:
            # RFC 9110 section 13.1.1 (If-Match), which both S3 and obstore's directory store
            # honour: the bytes served are those of the object that was checked.
            options["if_match"] = if_match
        if end is not None:
            if end <= lo:
                return iter(())
            options["range"] = (lo, end)
        elif lo:
            options["range"] = {"offset": lo}
        try:
            result = obstore.get(self._store, key, options=options)
        except _NOT_FOUND:
            raise ResultMissingError(location) from None
        except PreconditionError:
            raise ResultChangedError(location) from None
        except _STORE_ERRORS as exc:
            raise self._unavailable("get", location, exc) from exc
        return self._stream(result.stream(min_chunk_size=READ_CHUNK_BYTES), location)

    def digest(self, location: str, *, limit: int) -> ObjectDigest:
        """Read the object at ``location`` once, streamed, and hash it (memory: one chunk).

        Reading stops past ``limit`` bytes: a larger object is no match whatever follows,
        and a replaced object must not cost more than the recorded one. Raises as ``read``.
        """
        key = self.url.key_of(location)
        try:
            result = obstore.get(self._store, key)
        except _NOT_FOUND:
            raise ResultMissingError(location) from None
        except _STORE_ERRORS as exc:
            raise self._unavailable("get", location, exc) from exc
        tag = result.meta.get("e_tag")
        running = hashlib.sha256()
        seen = 0
        for chunk in self._stream(result.stream(min_chunk_size=READ_CHUNK_BYTES), location):
            running.update(chunk)
            seen += len(chunk)
            if seen > limit:
                break
        return ObjectDigest(tag=tag, size=seen, sha256=running.hexdigest())

    def _stream(self, chunks: Iterator[bytes], location: str) -> Iterator[bytes]:
        try:
            for chunk in chunks:
                yield bytes(chunk)
        except _STORE_ERRORS as exc:
            raise self._unavailable("get", location, exc) from exc

    def size(self, location: str) -> int | None:
        """The stored size at ``location``, or None when nothing is there."""
        found = self.head(location)
        return None if found is None else found[0]

    def head(self, location: str) -> tuple[int, str | None] | None:
        """The stored size and store tag at ``location``, or None when nothing is there."""
        key = self.url.key_of(location)
        try:
            meta = obstore.head(self._store, key)
        except _NOT_FOUND:
            return None
        except _STORE_ERRORS as exc:
            raise self._unavailable("head", location, exc) from exc
        return int(meta["size"]), meta.get("e_tag")

    def verify(self, obj: StoredObject) -> str | None:
        """Re-read ``obj`` streamed: a problem naming its location, or None when it matches.

        Missing, a different size or a different sha256 is a problem text; a store that
        fails raises ``ResultStoreUnavailableError`` (it proves nothing either way).
        """
        size = self.size(obj.location)
        if size is None or size != obj.size:
            return mismatch(obj, size=size, sha256=None)
        running = hashlib.sha256()
        seen = 0
        try:
            for chunk in self.read(obj.location):
                running.update(chunk)
                seen += len(chunk)
        except ResultMissingError:
            return mismatch(obj, size=None, sha256=None)
        # Replaced between head and get: the size read is the one to report.
        return mismatch(obj, size=seen, sha256=running.hexdigest())

    def delete(self, location: str) -> None:
        """Remove the object at ``location``; nothing there is not an error."""
        key = self.url.key_of(location)
        try:
            obstore.delete(self._store, key)
        except _NOT_FOUND:
            return
        except _STORE_ERRORS as exc:
            raise self._unavailable("delete", location, exc) from exc

    def _unavailable(self, verb: str, location: str, exc: BaseException) -> Exception:
        return ResultStoreUnavailableError(f"result store: {verb} {location}: {_reason(exc)}")


def _s3_config(environ: Mapping[str, str]) -> S3Config:
    """S3 settings from the standard AWS variables; empty ones count as unset."""
    config: S3Config = {}
    if value := environ.get("AWS_ACCESS_KEY_ID"):
        config["access_key_id"] = value
    if value := environ.get("AWS_SECRET_ACCESS_KEY"):
        config["secret_access_key"] = value
    if value := environ.get("AWS_SESSION_TOKEN"):
        config["session_token"] = value
    if value := environ.get("AWS_REGION"):
        config["region"] = value
    if value := environ.get("AWS_ENDPOINT_URL"):
        config["endpoint"] = value
    return config
