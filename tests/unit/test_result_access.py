"""The download rules in the pure core: ranges (RFC 9110 section 14), Repr-Digest (RFC 9530
section 3), and what a result's state says about its bytes."""

from __future__ import annotations

import base64
import hashlib

import pytest

from jobwarden.models.results.access import (
    ByteRange,
    Unsatisfiable,
    choose_range,
    content_type,
    repr_digest,
    strong_etag,
    validated,
    validated_header,
)

ETAG = strong_etag("ab" * 32)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-9", (0, 10)),
        ("bytes=10-19", (10, 20)),
        ("bytes=90-", (90, 100)),
        ("bytes=-5", (95, 100)),
        ("bytes=-500", (0, 100)),  # a suffix longer than the object is the whole object
        ("bytes=95-500", (95, 100)),  # a last-pos past the end is clipped to it
        ("BYTES=0-0", (0, 1)),  # the range unit is case-insensitive (section 14.1)
        ("bytes= 3-4 ", (3, 5)),
    ],
)
def test_a_single_range_is_the_slice_it_names(header: str, expected: tuple[int, int]) -> None:
    chosen = choose_range(header, None, 100, ETAG)
    assert isinstance(chosen, ByteRange)
    assert (chosen.start, chosen.end) == expected
    assert chosen.content_range == f"bytes {expected[0]}-{expected[1] - 1}/100"


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=100-200", "bytes=-0"])
def test_a_range_outside_the_object_is_unsatisfiable_with_its_size(header: str) -> None:
    assert choose_range(header, None, 100, ETAG) == Unsatisfiable(size=100)
    assert Unsatisfiable(size=100).content_range == "bytes */100"


def test_any_range_of_an_empty_object_is_unsatisfiable() -> None:
    assert choose_range("bytes=0-", None, 0, ETAG) == Unsatisfiable(size=0)
    assert choose_range("bytes=-1", None, 0, ETAG) == Unsatisfiable(size=0)


@pytest.mark.parametrize(
    "header",
    [
        "bytes=0-1,5-6",  # several ranges: ignored (section 14.2), the whole is sent
        "bytes=5-1",  # last-pos before first-pos is invalid
        "items=0-1",
        "bytes=",
        "bytes=a-b",
        "bytes=-",
        "bytes=+1-2",
        "bytes=0-1;x",
    ],
)
def test_a_malformed_or_multi_range_header_is_ignored(header: str) -> None:
    assert choose_range(header, None, 100, ETAG) is None


def test_no_range_header_is_the_whole_object() -> None:
    assert choose_range(None, ETAG, 100, ETAG) is None


def test_if_range_with_our_strong_etag_keeps_the_range_and_anything_else_drops_it() -> None:
    assert choose_range("bytes=0-1", ETAG, 100, ETAG) == ByteRange(start=0, end=2, size=100)
    for other in ('"other"', "W/" + ETAG, "Wed, 21 Oct 2015 07:28:00 GMT"):
        assert choose_range("bytes=0-1", other, 100, ETAG) is None


def test_repr_digest_is_an_rfc_9530_sha_256_byte_sequence_of_the_bytes() -> None:
    data = b"hello result"
    field = repr_digest(hashlib.sha256(data).hexdigest())
    assert field.startswith("sha-256=:") and field.endswith(":")
    assert base64.b64decode(field[len("sha-256=:") : -1]) == hashlib.sha256(data).digest()


def test_the_state_says_whether_the_bytes_were_validated() -> None:
    assert validated("succeeded") is True
    assert validated("result_accepted") == "accepted"
    assert validated("result_validation_failed") is False
    assert validated("some_future_state") is False
    assert [validated_header(v) for v in (True, False, "accepted")] == ["true", "false", "accepted"]


def test_a_stored_content_type_that_cannot_be_a_header_becomes_octet_stream() -> None:
    assert content_type("application/x-ndjson") == "application/x-ndjson"
    assert content_type(None) == "application/octet-stream"
    assert content_type("text/plain\r\nSet-Cookie: x=1") == "application/octet-stream"
    assert content_type("") == "application/octet-stream"
