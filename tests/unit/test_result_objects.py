"""The result store's pure rules: store URLs, tenant-safe keys, the streamed digest."""

from __future__ import annotations

import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.errors import (
    GiveUpError,
    ResultLocationError,
    ResultStoreUnavailableError,
    ResultTooLargeError,
    RetryLaterError,
    SettingsError,
)
from jobwarden.models.results.objects import (
    StoredObject,
    StoreURL,
    StreamedDigest,
    check_key,
    key_segment,
    mismatch,
    object_key,
    parse_store_url,
)


@pytest.mark.parametrize(
    ("raw", "scheme", "root", "prefix", "url"),
    [
        ("file:///var/lib/jobwarden/results", "file", "/var/lib/jobwarden/results", "", None),
        ("file:///var/lib/jobwarden/results/", "file", "/var/lib/jobwarden/results", "", None),
        ("file://localhost/srv/r", "file", "/srv/r", "", "file:///srv/r"),
        ("file:///home/A%20B/r", "file", "/home/A B/r", "", "file:///home/A%20B/r"),
        ("s3://bucket", "s3", "bucket", "", None),
        ("s3://my.bucket-1/results/prod/", "s3", "my.bucket-1", "results/prod", None),
    ],
)
def test_a_store_url_is_parsed_to_its_canonical_form(
    raw: str, scheme: str, root: str, prefix: str, url: str | None
) -> None:
    parsed = parse_store_url(raw)
    assert (parsed.scheme, parsed.root, parsed.prefix) == (scheme, root, prefix)
    assert parsed.url == (url or raw.rstrip("/"))
    assert parse_store_url(parsed.url) == parsed


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "results",
        "/var/lib/results",
        "file:results",
        "file://host/dir",
        "file:///a/../b",
        "file:///a?x=1",
        "http://example.com/r",
        "gs://bucket/r",
        "s3://",
        "s3://UPPER/r",
        "s3://b/r",
        "s3://bucket/a/../b",
        "s3://bucket/%2e%2e",
        "s3://key:secret@bucket",
    ],
)
def test_a_bad_store_url_is_a_settings_error_naming_the_variable(raw: str) -> None:
    with pytest.raises(SettingsError, match=r"^JOBWARDEN_RESULT_STORE: "):
        parse_store_url(raw)


def test_credentials_in_the_url_are_never_echoed() -> None:
    with pytest.raises(SettingsError) as raised:
        parse_store_url("s3://AKIA:wJalrXUtnFEMI@bucket/p")
    assert "wJalrXUtnFEMI" not in str(raised.value) and "AKIA" not in str(raised.value)


def test_a_key_is_tenant_then_operation_then_name() -> None:
    assert object_key("tenant-a", "0b8e-41", "result") == "tenant-a/0b8e-41/result"
    assert object_key("acme.io", "op_1") == "acme.io/op_1/result"


@given(st.text(), st.text(), st.text())
def test_every_key_is_three_safe_segments_whatever_the_input(
    tenant: str, operation: str, name: str
) -> None:
    key = object_key(tenant, operation, name)
    assert len(key.split("/")) == 3
    assert check_key(key) == key
    assert not any(part in {"", ".", ".."} or "%" in part for part in key.split("/"))


@given(st.text(), st.text())
def test_different_tenants_never_share_a_segment(a: str, b: str) -> None:
    if a != b:
        assert key_segment(a) != key_segment(b)


@pytest.mark.parametrize("hostile", ["..", ".", "", "a/b", "%2e%2e", "_" + "0" * 32, "x" * 101])
def test_a_segment_outside_the_alphabet_is_hashed_and_marked(hostile: str) -> None:
    segment = key_segment(hostile)
    assert segment.startswith("_") and len(segment) == 33


@pytest.mark.parametrize("key", ["../x", "a/../b", "a//b", "/a", "a/", ".hidden/x", "a/%2e/b"])
def test_a_key_the_store_would_not_write_is_refused(key: str) -> None:
    with pytest.raises(ResultLocationError):
        check_key(key)


def test_a_location_outside_the_store_is_refused() -> None:
    store = StoreURL(scheme="s3", root="bucket", prefix="results")
    assert store.key_of("s3://bucket/results/t/o/result") == "t/o/result"
    for location in [
        "s3://bucket/other/t/o/result",
        "s3://bucket/results-evil/t/o/result",
        "s3://bucket/results/../secrets/x",
        "file:///results/t/o/result",
    ]:
        with pytest.raises(ResultLocationError):
            store.key_of(location)


@given(st.lists(st.binary(max_size=300), max_size=20))
def test_the_streamed_digest_is_hashlibs_over_the_same_bytes(chunks: list[bytes]) -> None:
    body = b"".join(chunks)
    digest = StreamedDigest(max_bytes=len(body))
    assert b"".join(digest.through(chunks)) == body
    stored = digest.stored_at("file:///r/k")
    assert stored == StoredObject(
        location="file:///r/k", sha256=hashlib.sha256(body).hexdigest(), size=len(body)
    )


def test_the_bound_refuses_the_chunk_that_crosses_it_before_passing_it_on() -> None:
    digest = StreamedDigest(max_bytes=10)
    passed: list[bytes] = []
    with pytest.raises(ResultTooLargeError, match="exceeds 10 bytes"):
        for chunk in digest.through([b"12345", b"67890", b"1"]):
            passed.append(chunk)
    assert passed == [b"12345", b"67890"] and digest.size == 10


def test_the_errors_say_what_the_caller_does_and_pickle() -> None:
    too_large = pickle.loads(pickle.dumps(ResultTooLargeError(7)))
    assert isinstance(too_large, ResultTooLargeError) and isinstance(too_large, GiveUpError)
    assert too_large.max_bytes == 7
    down = pickle.loads(pickle.dumps(ResultStoreUnavailableError("s3 down")))
    assert isinstance(down, RetryLaterError) and str(down.args[0]) == "s3 down"
    where = pickle.loads(pickle.dumps(ResultLocationError("s3://x/y", "not ours")))
    assert str(where) == "s3://x/y: not ours"


def test_mismatch_names_the_location_and_what_differs() -> None:
    obj = StoredObject(location="s3://b/p/k", sha256="aa", size=3)
    assert mismatch(obj, size=None, sha256=None) == "s3://b/p/k: missing"
    assert mismatch(obj, size=4, sha256=None) == "s3://b/p/k: size 4, expected 3"
    assert mismatch(obj, size=3, sha256="bb") == "s3://b/p/k: sha256 bb, expected aa"
    assert mismatch(obj, size=3, sha256="aa") is None
    with pytest.raises(ValueError, match="max_bytes"):
        StreamedDigest(max_bytes=-1)
