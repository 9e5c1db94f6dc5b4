"""The result store against a real directory and a real S3-compatible server process.

The S3 server is moto's standalone server (tests/s3_server.py says why and what it
cannot show). One server and one bucket serve the module; the test that kills a server
mid-upload starts its own private one.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobwarden.models.errors import (
    ResultLocationError,
    ResultMissingError,
    ResultStoreUnavailableError,
    ResultTooLargeError,
    SettingsError,
)
from jobwarden.models.results.objects import object_key
from jobwarden.tasks.results.store import ResultStore
from tests.s3_server import S3Server

MIB = 1024 * 1024


class SourceBrokeError(Exception):
    """The provider's stream failing mid-body, as the collect step would see it."""


def _chunks(total: int, size: int = MIB, seed: bytes = b"r") -> Iterator[bytes]:
    """``total`` bytes of varied content in ``size`` chunks, generated, never held whole."""
    sent, n = 0, 0
    while sent < total:
        block = hashlib.sha256(seed + n.to_bytes(8, "big")).digest()
        chunk = (block * (size // len(block) + 1))[: min(size, total - sent)]
        sent += len(chunk)
        n += 1
        yield chunk


def _sha256(chunks: Iterator[bytes]) -> tuple[str, int]:
    h, size = hashlib.sha256(), 0
    for chunk in chunks:
        h.update(chunk)
        size += len(chunk)
    return h.hexdigest(), size


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server.start(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def s3_url(s3_server: S3Server) -> str:
    bucket = f"jobwarden-test-{secrets.token_hex(4)}"
    s3_server.create_bucket(bucket)
    return f"s3://{bucket}/results"


@pytest.fixture(params=["file", "s3"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> ResultStore:
    if kind == "file":
        return ResultStore.from_url((tmp_path / "results").as_uri(), environ={})
    server: S3Server = request.getfixturevalue("s3_server")
    return ResultStore.from_url(request.getfixturevalue("s3_url"), environ=server.environ())


def _key() -> str:
    return object_key("tenant-a", f"op-{secrets.token_hex(6)}")


def _no_upload_left(store: ResultStore, request: pytest.FixtureRequest) -> None:
    """Nothing half-written remains: no pending S3 upload, no staging file on disk."""
    if store.url.scheme == "s3":
        server: S3Server = request.getfixturevalue("s3_server")
        assert server.pending_uploads(store.url.root) == []
    else:
        left = [p for p in Path(store.url.root).rglob("*") if p.is_file()]
        assert left == []


# -- round trips -------------------------------------------------------------------------


def test_a_result_round_trips_with_hashlibs_digest_and_size(store: ResultStore) -> None:
    body = b"".join(_chunks(3 * MIB + 123, size=64 * 1024))
    stored = store.put_stream(_key(), _chunks(3 * MIB + 123, size=64 * 1024), max_bytes=4 * MIB)

    assert stored.sha256 == hashlib.sha256(body).hexdigest()
    assert stored.size == len(body) == store.size(stored.location)
    assert stored.location.startswith(store.url.url + "/tenant-a/op-")
    assert b"".join(store.read(stored.location)) == body
    assert store.verify(stored) is None


@pytest.mark.parametrize(
    ("start", "end"),
    [(0, 1), (5, 70_000), (MIB - 1, MIB + 1), (100, None), (None, 17), (3 * MIB, 4 * MIB)],
)
def test_a_ranged_read_returns_exactly_that_slice(
    store: ResultStore, start: int | None, end: int | None
) -> None:
    body = b"".join(_chunks(3 * MIB + 123))
    stored = store.put_stream(_key(), [body], max_bytes=len(body))

    assert b"".join(store.read(stored.location, start, end)) == body[start:end]


def test_an_empty_result_is_stored_with_the_empty_digest(store: ResultStore) -> None:
    stored = store.put_stream(_key(), iter([b"", b""]), max_bytes=0)

    assert (stored.size, stored.sha256) == (0, hashlib.sha256(b"").hexdigest())
    assert store.size(stored.location) == 0
    assert b"".join(store.read(stored.location)) == b""


def test_a_64_mib_stream_in_1_mib_chunks_is_stored_with_the_right_digest(
    store: ResultStore,
) -> None:
    total = 64 * MIB + 5
    stored = store.put_stream(_key(), _chunks(total), max_bytes=total)

    assert (stored.sha256, stored.size) == _sha256(_chunks(total))
    assert store.verify(stored) is None


# -- nothing partial is ever recorded ----------------------------------------------------


def test_past_max_bytes_nothing_is_stored_and_the_source_is_not_drained(
    store: ResultStore, request: pytest.FixtureRequest
) -> None:
    key = _key()
    pulled: list[int] = []

    def source() -> Iterator[bytes]:
        for i, chunk in enumerate(_chunks(40 * MIB)):
            pulled.append(i)
            yield chunk

    with pytest.raises(ResultTooLargeError) as raised:
        store.put_stream(key, source(), max_bytes=20 * MIB)

    assert raised.value.max_bytes == 20 * MIB
    assert store.size(store.url.location(key)) is None
    # Refused at the chunk that crossed the bound, not after reading the whole body.
    assert len(pulled) == 21
    _no_upload_left(store, request)


def test_a_source_raising_mid_stream_leaves_no_object(
    store: ResultStore, request: pytest.FixtureRequest
) -> None:
    key = _key()

    def source() -> Iterator[bytes]:
        yield from _chunks(20 * MIB)  # past two 8 MiB parts: an upload is under way
        raise SourceBrokeError("connection reset by provider")

    with pytest.raises(SourceBrokeError, match="connection reset"):
        store.put_stream(key, source(), max_bytes=100 * MIB)

    assert store.size(store.url.location(key)) is None
    _no_upload_left(store, request)


def test_a_source_raising_an_os_error_is_not_mistaken_for_the_store_failing(
    store: ResultStore, request: pytest.FixtureRequest
) -> None:
    key = _key()

    def source() -> Iterator[bytes]:
        yield b"x" * MIB
        raise ConnectionResetError("the provider hung up")

    # The collect step must see its provider's failure, not a store to retry against.
    with pytest.raises(ConnectionResetError):
        store.put_stream(key, source(), max_bytes=10 * MIB)
    assert store.size(store.url.location(key)) is None
    _no_upload_left(store, request)


def test_a_failed_replace_keeps_the_object_that_was_there(store: ResultStore) -> None:
    key = _key()
    first = store.put_stream(key, [b"the first result"], max_bytes=100)

    def source() -> Iterator[bytes]:
        yield b"x" * MIB
        raise SourceBrokeError("gone")

    with pytest.raises(SourceBrokeError):
        store.put_stream(key, source(), max_bytes=10 * MIB)

    assert store.verify(first) is None


def test_the_s3_server_killed_mid_upload_is_retry_later_and_nothing_is_recorded(
    tmp_path: Path,
) -> None:
    server = S3Server.start(tmp_path)
    try:
        bucket = f"jobwarden-kill-{secrets.token_hex(4)}"
        server.create_bucket(bucket)
        store = ResultStore.from_url(
            f"s3://{bucket}/results", environ=server.environ(), timeout_seconds=5, max_retries=1
        )
        key = _key()
        sent = 0

        def source() -> Iterator[bytes]:
            nonlocal sent
            for chunk in _chunks(64 * MIB):
                if sent == 20:  # two parts sent, the third under way
                    server.kill()
                sent += 1
                yield chunk

        with pytest.raises(ResultStoreUnavailableError, match="result store") as raised:
            store.put_stream(key, source(), max_bytes=64 * MIB)
        assert sent < 64, "the upload stopped when the store went away"
        assert raised.value.retry_after is None
    finally:
        server.stop()

    # A fresh server on the same port and bucket: the key is empty. (moto keeps nothing
    # across a restart, so this shows only that no object is claimed; the abort itself is
    # pinned by test_a_source_raising_mid_stream_leaves_no_object's pending-upload check.)
    again = S3Server.start(tmp_path, port=server.port)
    try:
        again.create_bucket(bucket)
        assert store.size(store.url.location(key)) is None
    finally:
        again.stop()


def test_a_store_that_is_down_is_retry_later_for_every_call(tmp_path: Path) -> None:
    down = S3Server.start(tmp_path)
    down.stop()
    store = ResultStore.from_url(
        "s3://jobwarden-down/results", environ=down.environ(), timeout_seconds=2, max_retries=0
    )
    location = store.url.location(_key())

    with pytest.raises(ResultStoreUnavailableError):
        store.put_stream(_key(), [b"x"], max_bytes=1)
    with pytest.raises(ResultStoreUnavailableError):
        store.size(location)
    with pytest.raises(ResultStoreUnavailableError):
        store.read(location)


# -- verify ------------------------------------------------------------------------------


def test_verify_names_a_deleted_object(store: ResultStore) -> None:
    stored = store.put_stream(_key(), [b"kept for a while"], max_bytes=100)
    store.delete(stored.location)

    assert store.verify(stored) == f"{stored.location}: missing"
    with pytest.raises(ResultMissingError, match="missing"):
        store.read(stored.location)


def test_verify_names_a_replaced_object_by_size_or_by_digest(store: ResultStore) -> None:
    key = _key()
    stored = store.put_stream(key, [b"the real result"], max_bytes=100)

    store.put_stream(key, [b"the fake result"], max_bytes=100)  # same size, other bytes
    problem = store.verify(stored)
    assert problem is not None
    assert problem.startswith(f"{stored.location}: sha256 ")

    store.put_stream(key, [b"shorter"], max_bytes=100)
    assert store.verify(stored) == f"{stored.location}: size 7, expected 15"


# -- keys and locations ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tenant", "operation"),
    [
        ("..", ".."),
        ("../../outside", "x"),
        ("a/../../b", "../../../etc/passwd"),
        ("%2e%2e", "%2F..%2Fescape"),
        ("/absolute", "op"),
        ("tenant-b/..", "op"),
        ("", "op"),
    ],
)
def test_a_hostile_tenant_cannot_write_outside_its_prefix(
    tmp_path: Path, tenant: str, operation: str
) -> None:
    root = tmp_path / "results"
    store = ResultStore.from_url(root.as_uri(), environ={})
    neighbour = store.put_stream(object_key("tenant-b", "op"), [b"b's"], max_bytes=10)

    stored = store.put_stream(object_key(tenant, operation), [b"hostile"], max_bytes=10)

    files = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    written = next(p for p in files if p.read_bytes() == b"hostile")
    # Three segments under the root, the first of them the tenant's own.
    assert written.relative_to(root).parts[0] not in {"tenant-b", "..", ""}
    assert len(written.relative_to(root).parts) == 3
    assert stored.location == store.url.location(written.relative_to(root).as_posix())
    assert store.verify(neighbour) is None


@pytest.mark.parametrize("key", ["../escape", "a/../../b", "a//b", "a/%2e%2e/b", "/abs", "a/./b"])
def test_a_key_that_could_leave_the_store_is_refused_before_any_write(
    tmp_path: Path, key: str
) -> None:
    store = ResultStore.from_url((tmp_path / "results").as_uri(), environ={})

    with pytest.raises(ResultLocationError):
        store.put_stream(key, [b"x"], max_bytes=1)
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_a_location_in_another_store_is_refused(tmp_path: Path) -> None:
    store = ResultStore.from_url((tmp_path / "a").as_uri(), environ={})
    other = ResultStore.from_url((tmp_path / "b").as_uri(), environ={})
    stored = other.put_stream(_key(), [b"b's result"], max_bytes=100)

    with pytest.raises(ResultLocationError, match="not in the result store"):
        store.verify(stored)
    with pytest.raises(ResultLocationError):
        store.read(f"{store.url.url}/../b/{stored.location.rsplit('/b/', 1)[1]}")


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["results", "/var/lib/results", "file://relative/dir", "http://example.com/r", "s3://", ""],
)
def test_a_bad_store_url_is_a_clear_error_naming_the_variable(url: str) -> None:
    with pytest.raises(SettingsError, match="JOBWARDEN_RESULT_STORE"):
        ResultStore.from_url(url, environ={})


def test_s3_credentials_in_the_url_are_refused_without_echoing_them() -> None:
    with pytest.raises(SettingsError, match="JOBWARDEN_RESULT_STORE") as raised:
        ResultStore.from_url("s3://AKIAEXAMPLE:hunter2@bucket/prefix", environ={})
    assert "hunter2" not in str(raised.value)
    assert "AWS_SECRET_ACCESS_KEY" in str(raised.value)


def test_a_directory_that_cannot_be_made_is_a_settings_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")

    with pytest.raises(SettingsError, match="JOBWARDEN_RESULT_STORE"):
        ResultStore.from_url((blocker / "results").as_uri(), environ={})


def test_the_default_setting_is_a_file_store_a_non_root_user_can_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from jobwarden.config.settings import load_settings

    # The test run sets its own store (tests/conftest.py); the default is what is left.
    monkeypatch.delenv("JOBWARDEN_RESULT_STORE")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    url = load_settings().result_store
    assert url == (tmp_path / "jobwarden" / "results").as_uri()
