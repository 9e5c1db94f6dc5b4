"""Result integrity, one convention at a time, with each spec's own test vectors.

RFC 9530 (Digest Fields) appendix: ``{"hello": "world"}`` has sha-256
``X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=`` and sha-512 ``WZDPaVn/…Jwew==``; empty content
has sha-256 ``47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=``. RFC 1321's MD5 test suite and
RFC 1864's ``Q2hlY2sgSW50ZWdyaXR5IQ==`` ("Check Integrity!"). RFC 3720 appendix B.4's CRC32C
vectors, which Google Cloud Storage's ``x-goog-hash`` sends big-endian in base64.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models.contracts.contract import (
    ChecksumAlgorithm,
    ChecksumEncoding,
    DigestField,
    ResultSpec,
)
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError
from jobwarden.models.provider.pointers import MISSING
from jobwarden.models.results.digests import (
    Digester,
    DigestReport,
    MalformedFieldError,
    parse_dictionary,
)

HELLO = b'{"hello": "world"}'
HELLO_SHA256 = "X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE="
HELLO_SHA512 = (
    "WZDPaVn/7XgHaAy8pmojAkGWoRx2UFChF41A2svX+TaPm+AbwAgBWnrIiYllu7BNNyealdVLvRwEmTHWXvJwew=="
)
EMPTY_SHA256 = "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
# "hello" with its quotes: RFC 9530's partial-content example.
QUOTED_HELLO_SHA256 = "Wqdirjg/u3J688ejbUlApbjECpiUUtIwT8lY/z81Tno="
ALTERED = b'{"hello": "World"}'  # one byte changed in transit
# RFC 1321 appendix A.5.
MD5_VECTORS = {
    b"": "d41d8cd98f00b204e9800998ecf8427e",
    b"abc": "900150983cd24fb0d6963f7d28e17f72",
    b"message digest": "f96b697d7cb7938d525a2f31aaf161d0",
}
# RFC 3720 appendix B.4: CRC32C of 32 octets.
CRC32C_VECTORS = {
    bytes(32): "8a9136aa",
    b"\xff" * 32: "62a8ab43",
    bytes(range(32)): "46dd794e",
    bytes(range(31, -1, -1)): "113fdb5c",
}

HEADERS = ResultSpec(fetch="url", content_type=None)


def b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode()


def digests(*fields: DigestField, required: bool = True) -> ResultSpec:
    return replace(HEADERS, digests=fields, digests_required=required)


def report(
    spec: ResultSpec, content: bytes, headers: dict[str, str], promised: object = MISSING
) -> DigestReport:
    digester = Digester(spec, headers)
    digester.update(content)
    return digester.report(promised)


REPR = digests(DigestField.repr_digest)
CONTENT = digests(DigestField.content_digest)
MD5 = digests(DigestField.content_md5)
GOOG = digests(DigestField.x_goog_hash)


# --- RFC 9530 Repr-Digest and Content-Digest -------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "header", "content", "value", "checked"),
    [
        (REPR, "repr-digest", HELLO, f"sha-256=:{HELLO_SHA256}:", ["sha-256"]),
        (REPR, "repr-digest", HELLO, f"sha-512=:{HELLO_SHA512}:", ["sha-512"]),
        (
            REPR,
            "repr-digest",
            HELLO,
            f"sha-256=:{HELLO_SHA256}:, sha-512=:{HELLO_SHA512}:",
            ["sha-256", "sha-512"],
        ),
        (CONTENT, "content-digest", HELLO, f"sha-256=:{HELLO_SHA256}:", ["sha-256"]),
        (CONTENT, "content-digest", b"", f"sha-256=:{EMPTY_SHA256}:", ["sha-256"]),
        (CONTENT, "content-digest", b'"hello"', f"sha-256=:{QUOTED_HELLO_SHA256}:", ["sha-256"]),
        # Padding may be left out of an sf-binary (RFC 8941 section 4.2.7).
        (REPR, "repr-digest", HELLO, f"sha-256=:{HELLO_SHA256.rstrip('=')}:", ["sha-256"]),
        # The registry's insecure algorithms we can compute are checked too.
        (REPR, "repr-digest", b"abc", f"md5=:{b64(MD5_VECTORS[b'abc'])}:", ["md5"]),
        (REPR, "repr-digest", bytes(32), f"crc32c=:{b64('8a9136aa')}:", ["crc32c"]),
    ],
)
def test_rfc9530_digest_fields_match_the_rfc_examples(
    spec: ResultSpec, header: str, content: bytes, value: str, checked: list[str]
) -> None:
    result = report(spec, content, {header: value})
    assert result.problem is None
    assert [c.algorithm for c in result.checks] == checked
    assert all(c.matches and c.ours == c.theirs for c in result.checks)
    assert result.checks[0].source == (
        "Repr-Digest" if header == "repr-digest" else "Content-Digest"
    )


def test_rfc9530_an_altered_body_with_a_correct_looking_repr_digest_is_a_mismatch_naming_both() -> (
    None
):
    result = report(REPR, ALTERED, {"repr-digest": f"sha-256=:{HELLO_SHA256}:"})
    assert result.problem == "checksum mismatch"
    (check,) = result.checks
    expected_ours = base64.b64encode(hashlib.sha256(ALTERED).digest()).decode()
    assert check.summary() == {
        "source": "Repr-Digest",
        "algorithm": "sha-256",
        "ours": f":{expected_ours}:",
        "theirs": f":{HELLO_SHA256}:",
        "matches": False,
    }


def test_rfc9530_one_mismatch_among_several_algorithms_fails_the_result() -> None:
    wrong_512 = base64.b64encode(bytes(64)).decode()
    result = report(
        REPR, HELLO, {"repr-digest": f"sha-256=:{HELLO_SHA256}:, sha-512=:{wrong_512}:"}
    )
    assert result.problem == "checksum mismatch"
    assert [c.matches for c in result.checks] == [True, False]


@pytest.mark.parametrize(
    ("value", "required", "problem", "note"),
    [
        # Unknown algorithms are ignored (RFC 9530 section 2), then nothing is left to check.
        ("sha=:AAAA:, unixsum=30637", True, "no usable digest in Repr-Digest", "sha, unixsum"),
        ("sha=:AAAA:", False, None, "sha"),
        # Malformed fields are ignored as a whole (RFC 8941 section 4.2).
        (f"sha-256={HELLO_SHA256}", True, "no usable digest", "malformed"),
        ("sha-256=:not base64!:", True, "no usable digest", "malformed"),
        ("sha-256=:AAAA:", True, "no usable digest", "3 octets, not 32"),
        (f"SHA-256=:{HELLO_SHA256}:", True, "no usable digest", "malformed"),
        (f"sha-256=:{HELLO_SHA256}:,", True, "no usable digest", "trailing comma"),
        ("sha-256=1", True, "no usable digest", "not a byte sequence"),
        ("", True, "no usable digest in Repr-Digest", None),
    ],
)
def test_rfc9530_unknown_algorithms_and_malformed_fields_are_ignored_and_noted(
    value: str, required: bool, problem: str | None, note: str | None
) -> None:
    spec = digests(DigestField.repr_digest, required=required)
    result = report(spec, HELLO, {"repr-digest": value})
    assert result.checks == ()
    if problem is None:
        assert result.problem is None
    else:
        assert problem in (result.problem or "")
    if note is not None:
        assert any(note in n for n in result.notes)


def test_rfc9530_a_known_algorithm_is_checked_beside_an_unknown_one() -> None:
    result = report(REPR, HELLO, {"repr-digest": f"unixcksum=:AAAA:, sha-256=:{HELLO_SHA256}:"})
    assert result.problem is None
    assert [c.algorithm for c in result.checks] == ["sha-256"]
    assert result.notes == ("Repr-Digest members not known here: unixcksum",)


def test_rfc8941_dictionaries_with_parameters_inner_lists_and_other_items_parse() -> None:
    members = parse_dictionary(
        f'sha-256=:{HELLO_SHA256}:;p=1, x=(a "b" 2);q, y=?1, z="s\\"t", w=1.5, t=tok/en, *k, f=-3'
    )
    assert members["sha-256"] == base64.b64decode(HELLO_SHA256)
    assert members["x"] is None and members["y"] is True and members["*k"] is True
    assert parse_dictionary("a=1, a=:AAAA:")["a"] == b"\x00\x00\x00"  # the later member wins
    assert parse_dictionary("   ") == {}


@pytest.mark.parametrize("bad", ["a=(1 2", "a=(1,2)", "a=1 b=2", "a=:AA:A:", "a=?2", "a=@1"])
def test_rfc8941_malformed_dictionaries_are_refused(bad: str) -> None:
    with pytest.raises(MalformedFieldError):
        parse_dictionary(bad)


# --- RFC 1864 Content-MD5 --------------------------------------------------------------------


@pytest.mark.parametrize(("content", "hex_md5"), MD5_VECTORS.items())
def test_rfc1864_content_md5_of_the_rfc1321_vectors_matches(content: bytes, hex_md5: str) -> None:
    result = report(MD5, content, {"content-md5": b64(hex_md5)})
    assert result.problem is None
    (check,) = result.checks
    assert (check.source, check.algorithm, check.theirs) == ("Content-MD5", "md5", b64(hex_md5))


def test_rfc1864_content_md5_is_base64_of_the_sixteen_octets() -> None:
    # RFC 1864 section 2: a digest of "Check Integrity!" is sent as this value.
    spec = MD5
    result = report(spec, b"x", {"content-md5": "Q2hlY2sgSW50ZWdyaXR5IQ=="})
    assert result.problem == "checksum mismatch"
    assert result.checks[0].theirs == base64.b64encode(b"Check Integrity!").decode()


@pytest.mark.parametrize(
    ("value", "note"),
    [
        ("not base64!", "not base64"),
        (b64("abcd"), "2 octets, not 16"),
        (MD5_VECTORS[b"abc"], "not 16"),  # hex where base64 belongs
    ],
)
def test_rfc1864_a_malformed_content_md5_is_not_a_usable_digest(value: str, note: str) -> None:
    result = report(MD5, b"abc", {"content-md5": value})
    assert result.problem is not None and "no usable digest in Content-MD5" in result.problem
    assert note in result.problem


def test_rfc1864_an_altered_body_with_the_original_content_md5_is_a_mismatch() -> None:
    result = report(MD5, b"abd", {"content-md5": b64(MD5_VECTORS[b"abc"])})
    assert result.problem == "checksum mismatch"
    assert result.checks[0].ours == base64.b64encode(hashlib.md5(b"abd").digest()).decode()


# --- Google Cloud Storage x-goog-hash ---------------------------------------------------------


@pytest.mark.parametrize(("content", "hex_crc"), CRC32C_VECTORS.items())
def test_gcs_x_goog_hash_crc32c_matches_the_rfc3720_vectors_big_endian(
    content: bytes, hex_crc: str
) -> None:
    result = report(GOOG, content, {"x-goog-hash": f"crc32c={b64(hex_crc)}"})
    assert result.problem is None
    assert result.checks[0].ours == b64(hex_crc)


def test_gcs_x_goog_hash_checks_crc32c_and_md5_sent_as_two_header_lines() -> None:
    # Two x-goog-hash lines arrive joined by ", " (RFC 9110 section 5.3).
    crc = base64.b64encode(bytes.fromhex("c1d04330")).decode()  # CRC32C of b"a"
    md5 = base64.b64encode(hashlib.md5(b"a").digest()).decode()
    result = report(GOOG, b"a", {"x-goog-hash": f"crc32c={crc}, md5={md5}"})
    assert result.problem is None
    assert [(c.algorithm, c.matches) for c in result.checks] == [("crc32c", True), ("md5", True)]


def test_gcs_an_altered_body_with_the_original_x_goog_hash_is_a_mismatch() -> None:
    value = f"crc32c={b64('8a9136aa')},md5={b64(hashlib.md5(bytes(32)).hexdigest())}"
    result = report(GOOG, bytes(31) + b"\x01", {"x-goog-hash": value})
    assert result.problem == "checksum mismatch"
    assert [c.matches for c in result.checks] == [False, False]


@pytest.mark.parametrize(
    ("value", "note"),
    [
        ("crc32c", "not name=value"),
        ("crc32c=%%%", "not base64"),
        ("crc32c=AAAA", "3 octets, not 4"),
        (f"crc32c={b64('8a9136aa')},crc32c={b64('62a8ab43')}", "two different crc32c values"),
        ("sha1=AAAA", "members not known here: sha1"),
    ],
)
def test_gcs_a_malformed_or_unknown_x_goog_hash_is_not_a_usable_digest(
    value: str, note: str
) -> None:
    result = report(GOOG, bytes(32), {"x-goog-hash": value})
    assert result.checks == ()
    assert result.problem is not None and note in result.problem


def test_gcs_hashes_of_a_stored_gzip_object_served_decompressed_are_not_checkable() -> None:
    # Decompressive transcoding: the hashes are of the stored gzip bytes, as Google's clients know.
    headers = {"x-goog-hash": f"crc32c={b64('8a9136aa')}", "x-goog-stored-content-encoding": "gzip"}
    result = report(GOOG, b"not the stored bytes", headers)
    assert result.checks == ()
    assert result.problem is not None and "served decompressed" in result.problem
    assert report(replace(GOOG, digests_required=False), b"x", headers).problem is None


# --- content-coding and streaming ------------------------------------------------------------


def test_header_digests_of_a_gzip_answer_cover_the_coded_bytes() -> None:
    coded = gzip.compress(HELLO, mtime=0)
    sha = base64.b64encode(hashlib.sha256(coded).digest()).decode()
    headers = {"content-encoding": "gzip", "repr-digest": f"sha-256=:{sha}:"}
    # Only the decoded bytes: the digest cannot be compared, and is not called a mismatch.
    decoded_only = report(REPR, HELLO, headers)
    assert decoded_only.checks == ()
    assert decoded_only.problem is not None and "gzip-coded bytes" in decoded_only.problem
    # Fed the bytes as sent as well (what a streaming edge does), it is checked.
    digester = Digester(REPR, headers)
    digester.update_wire(coded)
    digester.update(HELLO)
    streamed = digester.report(MISSING)
    assert streamed.problem is None and streamed.checks[0].matches


def test_a_digester_fed_chunk_by_chunk_equals_one_fed_at_once() -> None:
    spec = replace(
        digests(DigestField.repr_digest, DigestField.x_goog_hash),
        checksum_pointer="/sha",
    )
    content = bytes(range(256)) * 1000
    headers = {
        "repr-digest": "sha-512=:"
        + base64.b64encode(hashlib.sha512(content).digest()).decode()
        + ":",
        "x-goog-hash": "md5=" + base64.b64encode(hashlib.md5(content).digest()).decode(),
    }
    promised = hashlib.sha256(content).hexdigest()
    digester = Digester(spec, headers)
    for start in range(0, len(content), 4096):
        digester.update(content[start : start + 4096])
    assert digester.size == len(content)
    chunked = digester.report(promised)
    assert chunked == report(spec, content, headers, promised)
    assert chunked.problem is None and len(chunked.checks) == 3


def test_a_required_digest_field_that_is_absent_fails_and_an_optional_one_does_not() -> None:
    spec = digests(DigestField.repr_digest, DigestField.content_digest)
    assert report(spec, HELLO, {}).problem == (
        "the provider gave no usable digest in Repr-Digest or Content-Digest"
    )
    assert report(replace(spec, digests_required=False), HELLO, {}).problem is None
    # One of the listed fields is enough.
    assert report(spec, HELLO, {"content-digest": f"sha-256=:{HELLO_SHA256}:"}).problem is None


@pytest.mark.parametrize(
    ("header", "value", "source"),
    [
        ("repr-digest", f"sha-256=:{HELLO_SHA256}:", "Repr-Digest"),
        ("content-digest", f"sha-512=:{HELLO_SHA512}:", "Content-Digest"),
        ("content-md5", base64.b64encode(hashlib.md5(HELLO).digest()).decode(), "Content-MD5"),
        (
            "x-goog-hash",
            "md5=" + base64.b64encode(hashlib.md5(HELLO).digest()).decode(),
            "x-goog-hash",
        ),
    ],
)
def test_a_digest_field_the_contract_does_not_list_is_checked_all_the_same(
    header: str, value: str, source: str
) -> None:
    assert HEADERS.digests == ()
    right = report(HEADERS, HELLO, {header: value})
    assert right.problem is None
    assert [(c.source, c.matches) for c in right.checks] == [(source, True)]
    wrong = report(HEADERS, ALTERED, {header: value})
    assert wrong.problem == "checksum mismatch"
    assert [(c.source, c.matches) for c in wrong.checks] == [(source, False)]


# --- a digest in the status body --------------------------------------------------------------


def body(algorithm: ChecksumAlgorithm, encoding: ChecksumEncoding) -> ResultSpec:
    return replace(
        HEADERS,
        checksum_pointer="/result/digest",
        checksum_algorithm=algorithm,
        checksum_encoding=encoding,
    )


@pytest.mark.parametrize(
    ("algorithm", "encoding", "content", "promised"),
    [
        (ChecksumAlgorithm.sha256, ChecksumEncoding.hex, HELLO, hashlib.sha256(HELLO).hexdigest()),
        (
            ChecksumAlgorithm.sha256,
            ChecksumEncoding.hex,
            HELLO,
            hashlib.sha256(HELLO).hexdigest().upper(),
        ),
        (ChecksumAlgorithm.sha256, ChecksumEncoding.base64, HELLO, HELLO_SHA256),
        (ChecksumAlgorithm.sha512, ChecksumEncoding.base64, HELLO, HELLO_SHA512),
        (ChecksumAlgorithm.md5, ChecksumEncoding.hex, b"abc", MD5_VECTORS[b"abc"]),
        (ChecksumAlgorithm.crc32c, ChecksumEncoding.hex, bytes(32), "8a9136aa"),
        (ChecksumAlgorithm.crc32c, ChecksumEncoding.base64, b"\xff" * 32, b64("62a8ab43")),
    ],
)
def test_a_status_body_digest_is_read_in_the_contracts_algorithm_and_encoding(
    algorithm: ChecksumAlgorithm, encoding: ChecksumEncoding, content: bytes, promised: str
) -> None:
    result = report(body(algorithm, encoding), content, {}, promised)
    assert result.problem is None
    (check,) = result.checks
    assert (check.source, check.algorithm) == ("status body /result/digest", algorithm.value)


@pytest.mark.parametrize(
    ("promised", "problem"),
    [
        (hashlib.sha256(ALTERED).hexdigest(), "checksum mismatch"),
        (MISSING, "the provider gave no checksum"),
        (None, "the provider gave no checksum"),
        ("xyz", "the status body's checksum at /result/digest is not a sha256 hex digest"),
        ("ab" * 31, "is not a sha256 hex digest"),
        (HELLO_SHA256, "is not a sha256 hex digest"),  # base64 where hex belongs
        (12345, "is not a sha256 hex digest"),
    ],
)
def test_a_status_body_digest_that_disagrees_is_missing_or_unreadable_fails(
    promised: Any, problem: str
) -> None:
    result = report(body(ChecksumAlgorithm.sha256, ChecksumEncoding.hex), HELLO, {}, promised)
    assert result.problem is not None and problem in result.problem


# --- contract fields --------------------------------------------------------------------------

SANDBOX = Path(__file__).resolve().parents[2] / "config" / "providers" / "sandbox.toml"


def with_result(tmp_path: Path, result_table: str) -> Path:
    text = SANDBOX.read_text()
    start, end = text.index("[result]"), text.index("[poll]")
    path = tmp_path / "sandbox.toml"
    path.write_text(text[:start] + "[result]\n" + result_table + "\n\n" + text[end:])
    return path


def test_a_contract_names_its_digest_fields_algorithm_and_encoding(tmp_path: Path) -> None:
    table = """fetch = "url"
digests = ["repr-digest", "x-goog-hash"]
checksum_pointer = "/result/crc"
checksum_algorithm = "crc32c"
checksum_encoding = "base64"
"""
    spec = load_contract(with_result(tmp_path, table)).result
    assert spec is not None
    assert spec.digests == (DigestField.repr_digest, DigestField.x_goog_hash)
    assert spec.digests_required is True
    assert (spec.checksum_algorithm, spec.checksum_encoding) == ("crc32c", "base64")


@pytest.mark.parametrize(
    ("table", "field", "problem"),
    [
        ('fetch = "url"\ndigests = ["digest"]', "result.digests[0]", "must be one of"),
        ('fetch = "url"\ndigests = ["content-md5", "content-md5"]', "result.digests[1]", "twice"),
        ('fetch = "url"\ndigests = []', "result.digests", "at least one"),
        ('fetch = "inline"\ndigests = ["repr-digest"]', "result.digests", "inline"),
        ('fetch = "url"\ndigests_required = false', "result.digests_required", "only allowed"),
        ('fetch = "url"\nchecksum_algorithm = "md5"', "result.checksum_algorithm", "only allowed"),
        (
            'fetch = "url"\nchecksum_pointer = "/s"\nchecksum_encoding = "b64"',
            "result.checksum_encoding",
            "must be one of",
        ),
        ('fetch = "url"\nchecksum_header = "X-Sum"', "result.checksum_header", "unknown field"),
    ],
)
def test_digest_fields_a_contract_cannot_honour_are_refused_at_load(
    tmp_path: Path, table: str, field: str, problem: str
) -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(with_result(tmp_path, table))
    assert caught.value.field == field
    assert problem in caught.value.problem
