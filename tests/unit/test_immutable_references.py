"""Immutable references (issue 40): a command schema's ``x-jobwarden-immutable-reference``
refuses a branch, tag or short id naming the field, is itself checked when the contract is
loaded, and lists the references an approver is shown. Pure: no servers.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.contracts.command_schema import (
    CommandSchema,
    SchemaDocumentError,
    compile_schema,
)
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.contracts.references import (
    IMMUTABLE_REFERENCE,
    ImmutableReference,
    ReferenceKind,
    reference_problem,
)
from jobwarden.models.errors import ContractError, InvalidCommandError

SANDBOX = (
    Path(__file__).resolve().parents[2] / "config" / "providers" / "sandbox.toml"
).read_text()
SHA1 = "0123456789abcdef0123456789abcdef01234567"
SHA256 = "ab" * 32
K = ReferenceKind

# (kind, value, accepted)
TABLE: list[tuple[ReferenceKind, str, bool]] = [
    (K.git_commit, SHA1, True),
    (K.git_commit, SHA256, True),  # a SHA-256 repository's object name
    (K.git_commit, "main", False),
    (K.git_commit, "HEAD", False),
    (K.git_commit, "v1.2", False),
    (K.git_commit, SHA1[:7], False),  # a short id can become ambiguous
    (K.git_commit, SHA1[:39], False),
    (K.git_commit, SHA1 + "0", False),  # 41: neither length
    (K.git_commit, SHA1.upper(), False),  # git writes lower case; one spelling, one fingerprint
    (K.git_commit, SHA1 + "\n", False),  # no trailing newline ($ in Python would allow it)
    (K.git_commit, " " + SHA1, False),
    (K.git_commit, "", False),
    (K.oci_digest, f"sha256:{SHA256}", True),
    (K.oci_digest, f"registry.example.com/team/app@sha256:{SHA256}", True),
    (K.oci_digest, f"registry.example.com:5000/app@sha256:{SHA256}", True),
    (K.oci_digest, f"app@sha256:{SHA256}", True),
    (K.oci_digest, "latest", False),
    (K.oci_digest, "registry/app:latest", False),
    (K.oci_digest, f"registry/app:1.2@sha256:{SHA256}", False),  # a tag beside the digest
    (K.oci_digest, f"sha256:{SHA256[:63]}", False),
    (K.oci_digest, f"sha512:{SHA256}{SHA256}", False),
    (K.oci_digest, f"SHA256:{SHA256}", False),
    (K.oci_digest, f"Registry/App@sha256:{SHA256}", False),
    (K.oci_digest, SHA256, False),  # a bare hex string is not a digest: the algorithm is missing
    (K.sha256, SHA256, True),
    (K.sha256, f"sha256:{SHA256}", False),
    (K.sha256, SHA1, False),
    (K.sha256, SHA256.upper(), False),
]


@pytest.mark.parametrize(("kind", "value", "accepted"), TABLE)
def test_each_kind_accepts_only_an_exact_reference(
    kind: ReferenceKind, value: str, accepted: bool
) -> None:
    problem = reference_problem(kind, value)
    assert (problem is None) is accepted, problem
    if problem is not None:
        assert "not an immutable reference" in problem and kind.value in problem


@given(st.text(alphabet="0123456789abcdef", min_size=40, max_size=40))
def test_any_forty_lower_case_hex_digits_are_a_commit(value: str) -> None:
    assert reference_problem(K.git_commit, value) is None


@given(
    st.text(alphabet="0123456789abcdef", max_size=64),
    st.characters(exclude_characters=string.hexdigits[:16]),
    st.text(alphabet="0123456789abcdef", max_size=64),
)
def test_any_string_holding_a_character_outside_lower_case_hex_is_refused(
    before: str, other: str, after: str
) -> None:
    value = before + other + after
    assert reference_problem(K.git_commit, value) is not None
    assert reference_problem(K.sha256, value) is not None


def _deploy_schema() -> CommandSchema:
    return compile_schema(
        {
            "type": "object",
            "properties": {
                "deploy": {
                    "type": "object",
                    "properties": {
                        "commit": {"type": "string", IMMUTABLE_REFERENCE: "git_commit"},
                        "images": {
                            "type": "array",
                            "items": {"$ref": "#/$defs/image"},
                        },
                    },
                },
                "checksum": {"type": "string", IMMUTABLE_REFERENCE: "sha256"},
                "note": {"type": "string"},
            },
            "$defs": {"image": {"type": "string", IMMUTABLE_REFERENCE: "oci_digest"}},
        }
    )


@pytest.mark.parametrize(
    ("command", "field", "pointer"),
    [
        ({"deploy": {"commit": "main"}}, "command.deploy.commit", "/command/deploy/commit"),
        (
            {"deploy": {"images": [f"app@sha256:{SHA256}", "app:latest"]}},
            "command.deploy.images[1]",
            "/command/deploy/images/1",
        ),
        ({"checksum": "latest"}, "command.checksum", "/command/checksum"),
    ],
)
def test_a_mutable_name_is_refused_naming_the_field_and_its_pointer(
    command: dict[str, Any], field: str, pointer: str
) -> None:
    with pytest.raises(InvalidCommandError) as refused:
        _deploy_schema().apply(command)
    assert refused.value.field == field and refused.value.pointer == pointer
    assert "is not an immutable reference" in refused.value.problem


def test_the_references_of_a_command_are_listed_with_their_pointer_and_kind() -> None:
    command = {
        "note": "main",  # not marked: any text
        "deploy": {"commit": SHA1, "images": [f"a@sha256:{SHA256}", f"sha256:{SHA256}"]},
        "checksum": SHA256,
    }
    schema = _deploy_schema()
    assert schema.apply(command) == command
    assert schema.references(command) == (
        ImmutableReference(path=("deploy", "commit"), value=SHA1, kind=K.git_commit),
        ImmutableReference(
            path=("deploy", "images", 0), value=f"a@sha256:{SHA256}", kind=K.oci_digest
        ),
        ImmutableReference(
            path=("deploy", "images", 1), value=f"sha256:{SHA256}", kind=K.oci_digest
        ),
        ImmutableReference(path=("checksum",), value=SHA256, kind=K.sha256),
    )
    assert schema.references({"note": "x"}) == ()
    assert schema.references(command)[1].pointer == "/command/deploy/images/0"


def test_a_pointer_escapes_slash_and_tilde_as_rfc_6901_says() -> None:
    reference = ImmutableReference(path=("a/b", "c~d"), value=SHA256, kind=K.sha256)
    assert reference.pointer == "/command/a~1b/c~0d"


@pytest.mark.parametrize(
    ("document", "location", "problem"),
    [
        (
            {"type": "string", IMMUTABLE_REFERENCE: "branch"},
            IMMUTABLE_REFERENCE,
            "'branch' is not a reference kind; one of: git_commit, oci_digest, sha256",
        ),
        (
            {"properties": {"n": {"type": "integer", IMMUTABLE_REFERENCE: "sha256"}}},
            f"properties.n.{IMMUTABLE_REFERENCE}",
            'the schema beside it must say "type": "string"',
        ),
        (
            {"properties": {"n": {IMMUTABLE_REFERENCE: "sha256"}}},  # no type at all
            f"properties.n.{IMMUTABLE_REFERENCE}",
            '"type": "string"',
        ),
        (
            {"items": {"type": "string", IMMUTABLE_REFERENCE: ["sha256"]}},
            f"items.{IMMUTABLE_REFERENCE}",
            "is not a reference kind",
        ),
        (
            {"anyOf": [{"type": "string", IMMUTABLE_REFERENCE: "sha256"}]},
            f"anyOf[0].{IMMUTABLE_REFERENCE}",
            "must not sit inside anyOf",
        ),
        (
            {"contains": {"type": "string", IMMUTABLE_REFERENCE: "sha256"}},
            f"contains.{IMMUTABLE_REFERENCE}",
            "must not sit inside",
        ),
        (
            {"unevaluatedProperties": {"type": "string", IMMUTABLE_REFERENCE: "sha256"}},
            f"unevaluatedProperties.{IMMUTABLE_REFERENCE}",
            "must not sit inside",
        ),
    ],
)
def test_an_annotation_jobwarden_cannot_honour_is_refused_naming_its_place(
    document: dict[str, Any], location: str, problem: str
) -> None:
    with pytest.raises(SchemaDocumentError) as refused:
        compile_schema(document)
    assert refused.value.location == location
    assert problem in refused.value.problem, refused.value.problem


def test_a_property_merely_named_like_the_keyword_is_not_an_annotation() -> None:
    schema = compile_schema({"properties": {IMMUTABLE_REFERENCE: {"type": "integer"}}})
    assert schema.apply({IMMUTABLE_REFERENCE: 3}) == {IMMUTABLE_REFERENCE: 3}


def test_the_contract_loader_names_the_annotation_in_the_command_schema(tmp_path: Path) -> None:
    table = (
        "[command.schema]\n"
        "[command.schema.properties.commit]\n"
        'type = "string"\n'
        f'"{IMMUTABLE_REFERENCE}" = "tag"\n'
    )
    path = tmp_path / "deploy.toml"
    text = SANDBOX.replace('name = "sandbox"', 'name = "deploy"')
    path.write_text(text.replace("[create]\n", f"{table}\n[create]\n", 1))
    with pytest.raises(ContractError) as refused:
        load_contract(path)
    assert refused.value.field == f"command.schema.properties.commit.{IMMUTABLE_REFERENCE}"
    assert "'tag' is not a reference kind" in refused.value.problem
