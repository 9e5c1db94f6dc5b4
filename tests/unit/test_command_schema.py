"""Per-provider command schemas as pure functions: one intent, one validated command and
one fingerprint; every refusal names the failing path. No servers.

The rules are JSON Schema 2020-12 (validated by the jsonschema library) with two
documented readings of our own: `type: integer` refuses 10.0, and a pattern's `$`
is ECMA-262's end of input (docs/contracts.md, `[command]`).
"""

from __future__ import annotations

import pickle
import re
from dataclasses import replace
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
from jobwarden.models.contracts.contract import CommandSpec, ProviderContract
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import InvalidCommandError, InvalidSubmissionError
from jobwarden.models.intake.fingerprint import request_fingerprint
from jobwarden.models.intake.submission import FieldLimits, check_provider_command, check_submission

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
DIGEST = "sha256:" + "0123456789abcdef" * 4
IMAGE = f"registry.example.com:5000/team/exporter@{DIGEST}"
LIMITS = FieldLimits(
    tenant=200,
    provider=200,
    idempotency_key=255,
    source_event_id=255,
    requested_by=190,
    method=10,
    route=500,
)


@pytest.fixture(scope="module")
def export() -> ProviderContract:
    return load_contract(SHIPPED / "sandbox_export.toml")


def _schema(export: ProviderContract) -> CommandSchema:
    assert export.command is not None
    return export.command.schema


def _fingerprint(command: dict[str, Any]) -> str:
    return request_fingerprint(
        method="POST",
        route="/providers/sandbox_export/operations",
        tenant="acme",
        provider="sandbox_export",
        command=command,
    )


MINIMAL: dict[str, Any] = {
    "dataset": "orders",
    "image": IMAGE,
    "spend_cap": {"amount": 1050, "currency": "EUR"},
}
# The same intent: other field order, and every default written out.
SPELLED_OUT: dict[str, Any] = {
    "output": {"compression": "none", "format": "jsonl"},
    "spend_cap": {"currency": "EUR", "amount": 1050},
    "kind": "export",
    "image": IMAGE,
    "dataset": "orders",
}


def test_the_shipped_export_contract_names_its_schema_file_beside_it(
    export: ProviderContract,
) -> None:
    assert export.command is not None
    assert export.command.schema_file == "sandbox_export.command.schema.json"
    assert export.command.schema.document["additionalProperties"] is False


@pytest.mark.parametrize(
    "other",
    [
        SPELLED_OUT,
        {**MINIMAL, "output": {}},  # the nested defaults fill an empty object
        {**MINIMAL, "output": {"format": "jsonl"}},
        {**MINIMAL, "kind": "export"},
    ],
)
def test_one_intent_written_two_ways_has_one_fingerprint(
    export: ProviderContract, other: dict[str, Any]
) -> None:
    schema = _schema(export)
    assert _fingerprint(MINIMAL) != _fingerprint(other)  # as written they differ
    assert _fingerprint(schema.apply(MINIMAL)) == _fingerprint(schema.apply(other))


def test_defaults_are_filled_in_recursively_and_the_callers_command_is_untouched(
    export: ProviderContract,
) -> None:
    command = {**MINIMAL}
    filled = _schema(export).apply(command)
    assert filled["kind"] == "export"
    assert filled["output"] == {"format": "jsonl", "compression": "none"}
    assert command == MINIMAL and "output" not in command


def test_a_filled_default_is_a_copy_never_the_schemas_own_object() -> None:
    schema = compile_schema(
        {
            "type": "object",
            "properties": {
                "tags": {"type": "object", "default": {}, "properties": {"a": {"default": 1}}}
            },
        }
    )
    first = schema.apply({})
    first["tags"]["b"] = 2
    assert schema.apply({}) == {"tags": {"a": 1}}
    assert schema.document["properties"]["tags"]["default"] == {}


def test_a_default_satisfies_required_whatever_the_keyword_order() -> None:
    schema = compile_schema(
        {"required": ["format"], "properties": {"format": {"type": "string", "default": "csv"}}}
    )
    assert schema.apply({}) == {"format": "csv"}


def _with(**changes: Any) -> dict[str, Any]:
    return {**MINIMAL, **changes}


@pytest.mark.parametrize(
    ("command", "message", "path"),
    [
        (
            _with(spend_cap={"amount": 10.10, "currency": "EUR"}),
            "command.spend_cap.amount: 10.1 is not of type 'integer'",
            ("spend_cap", "amount"),
        ),
        # JSON Schema would take 10.0 as an integer; minor units refuse a decimal point.
        (
            _with(spend_cap={"amount": 10.0, "currency": "EUR"}),
            "command.spend_cap.amount: 10.0 is not of type 'integer'",
            ("spend_cap", "amount"),
        ),
        (
            _with(spend_cap={"amount": True, "currency": "EUR"}),
            "command.spend_cap.amount: True is not of type 'integer'",
            ("spend_cap", "amount"),
        ),
        (
            _with(colour="red"),
            "command.colour: unknown field; the schema allows only: behaviour, dataset, image,",
            ("colour",),
        ),
        (
            _with(output={"format": "csv", "zip": True}),
            "command.output.zip: unknown field; the schema allows only: compression, format",
            ("output", "zip"),
        ),
        (
            _with(image="registry.example.com/team/exporter:latest"),
            "command.image: 'registry.example.com/team/exporter:latest' is not an immutable "
            "reference",
            ("image",),
        ),
        (
            _with(image="exporter:main"),
            "command.image: 'exporter:main' is not an immutable reference",
            ("image",),
        ),
        (
            _with(image="exporter@sha256:abc"),
            "command.image: 'exporter@sha256:abc' is not an immutable reference",
            ("image",),
        ),
        # Python's `$` would match before this final newline; ECMA-262's does not.
        (_with(image=f"exporter@{DIGEST}\n"), "command.image: 'exporter@sha256:", ("image",)),
        (
            _with(spend_cap={"amount": 1050, "currency": "eur"}),
            "command.spend_cap.currency: 'eur' does not match '^[A-Z]{3}$'",
            ("spend_cap", "currency"),
        ),
        (
            {"dataset": "orders", "image": IMAGE},
            "command.spend_cap: is required",
            ("spend_cap",),
        ),
        (
            _with(output={"format": "xml"}),
            "command.output.format: 'xml' is not one of ['jsonl', 'csv']",
            ("output", "format"),
        ),
    ],
)
def test_a_command_the_schema_refuses_names_the_failing_path(
    export: ProviderContract, command: dict[str, Any], message: str, path: tuple[str, ...]
) -> None:
    with pytest.raises(InvalidCommandError, match=re.escape(message)) as caught:
        _schema(export).apply(command)
    assert caught.value.path == path
    assert caught.value.pointer == "/command/" + "/".join(path)
    assert isinstance(caught.value, InvalidSubmissionError)


def test_an_invalid_command_error_pickles_with_its_path() -> None:
    error = InvalidCommandError("command.a[0]", "is required", ("a~b/c", 0))
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.path, copy.problem) == (
        "command.a[0]: is required",
        ("a~b/c", 0),
        "is required",
    )
    # RFC 6901: "~" is written "~0" and "/" is written "~1" in a reference token.
    assert copy.pointer == "/command/a~0b~1c/0"


def test_a_path_through_an_array_shows_its_index() -> None:
    schema = compile_schema({"properties": {"items": {"items": {"type": "integer"}}}})
    with pytest.raises(InvalidCommandError, match=re.escape("command.items[1]: 'x' is not")):
        schema.apply({"items": [1, "x"]})


def test_a_very_long_value_is_cut_short_in_the_message() -> None:
    schema = compile_schema({"properties": {"s": {"type": "integer"}}})
    with pytest.raises(InvalidCommandError) as caught:
        schema.apply({"s": "x" * 10_000})
    assert len(str(caught.value)) < 400


def test_check_submission_returns_the_validated_command_for_a_contract_with_a_schema(
    export: ProviderContract,
) -> None:
    sub = check_submission(
        limits=LIMITS,
        providers={"sandbox_export": export},
        tenant="acme",
        provider="sandbox_export",
        idempotency_key="k",
        command=SPELLED_OUT,
        requested_by="svc",
    )
    assert sub.command == _schema(export).apply(MINIMAL)
    with pytest.raises(InvalidCommandError, match=re.escape("command.colour: unknown field")):
        check_submission(
            limits=LIMITS,
            providers={"sandbox_export": export},
            tenant="acme",
            provider="sandbox_export",
            idempotency_key="k",
            command={**MINIMAL, "colour": "red"},
            requested_by="svc",
        )


def test_a_contract_without_a_schema_takes_the_command_as_written() -> None:
    sandbox = load_contract(SHIPPED / "sandbox.toml")
    command = {"b": 1, "a": 10.0, "extra": {"x": None}}
    assert check_provider_command(command, sandbox) == command


def test_a_filled_default_must_still_fit_the_command_bounds() -> None:
    schema = compile_schema({"properties": {"blob": {"type": "string", "default": "x" * 70_000}}})
    contract = load_contract(SHIPPED / "sandbox.toml")
    big = replace(contract, command=CommandSpec(schema=schema))
    with pytest.raises(InvalidSubmissionError, match="bytes canonicalised"):
        check_provider_command({}, big)


# --- the schema itself, checked at compile (contract load) ------------------------------


@pytest.mark.parametrize(
    ("document", "location", "problem"),
    [
        ({"type": "objekt"}, "type", "is not valid under any of the given schemas"),
        ({"properties": {"a": {"pattern": "("}}}, "properties.a.pattern", "is not a 'regex'"),
        (
            {"properties": {"a": {"$ref": "https://schemas.example.com/amount.json"}}},
            "properties.a.$ref",
            "remote and file references are refused",
        ),
        ({"$ref": "amount.json#/x"}, "$ref", "is not a reference into this schema"),
        (
            {"$schema": "http://json-schema.org/draft-07/schema#"},
            "$schema",
            "must be 'https://json-schema.org/draft/2020-12/schema'",
        ),
        (
            {"properties": {"a": {"type": "integer", "default": 1.5}}},
            "properties.a.default",
            "does not satisfy its own schema: 1.5 is not of type 'integer'",
        ),
        (
            {"oneOf": [{"properties": {"a": {"default": 1}}}, {"required": ["b"]}]},
            "oneOf[0].properties.a.default",
            "would be filled in whichever branch matches",
        ),
        ({"properties": {"a": {"maximum": float("nan")}}}, "properties.a.maximum", "finite"),
    ],
)
def test_a_bad_schema_is_refused_naming_its_location(
    document: dict[str, Any], location: str, problem: str
) -> None:
    with pytest.raises(SchemaDocumentError) as caught:
        compile_schema(document)
    assert caught.value.location == location
    assert problem in caught.value.problem


def test_a_schema_nested_too_deeply_to_check_is_refused_not_a_crash() -> None:
    document: dict[str, Any] = {}
    node = document
    for _ in range(5000):
        node["items"] = {}
        node = node["items"]
    with pytest.raises(SchemaDocumentError, match="nested too deeply"):
        compile_schema(document)


def test_a_local_reference_resolves_and_a_property_named_like_a_keyword_is_a_property() -> None:
    schema = compile_schema(
        {
            "$defs": {"cents": {"type": "integer", "minimum": 0}},
            "properties": {"amount": {"$ref": "#/$defs/cents"}, "$schema": {"type": "string"}},
        }
    )
    assert schema.apply({"amount": 5, "$schema": "x"}) == {"amount": 5, "$schema": "x"}
    with pytest.raises(InvalidCommandError, match=re.escape("command.amount: -1 is less than")):
        schema.apply({"amount": -1})


def test_a_compiled_schema_pickles_and_compares_by_its_document() -> None:
    document = {"properties": {"a": {"default": 1}}}
    schema = compile_schema(document)
    copy = pickle.loads(pickle.dumps(schema))
    assert copy == schema and copy.apply({}) == {"a": 1}
    assert schema != compile_schema({"properties": {"a": {"default": 2}}})


# --- one intent, any spelling ----------------------------------------------------------

_OPTIONAL: dict[str, Any] = {"kind": "export", "format": "jsonl", "compression": "none"}


def _spelling(written: set[str], order: list[int]) -> dict[str, Any]:
    """MINIMAL with the defaults in ``written`` spelled out, fields in a shuffled order."""
    output = {k: _OPTIONAL[k] for k in ("format", "compression") if k in written}
    fields: list[tuple[str, Any]] = [
        ("dataset", "orders"),
        ("image", IMAGE),
        ("spend_cap", dict(reversed(list(MINIMAL["spend_cap"].items())))),
    ]
    if "kind" in written:
        fields.append(("kind", "export"))
    if output or "output" in written:
        fields.append(("output", output))
    rank = dict(zip(["dataset", "image", "spend_cap", "kind", "output"], order, strict=True))
    return dict(sorted(fields, key=lambda field: rank[field[0]]))


@given(
    written=st.sets(st.sampled_from(["kind", "format", "compression", "output"])),
    order=st.permutations(range(5)),
)
def test_every_spelling_of_the_intent_validates_to_one_command_and_one_fingerprint(
    written: set[str], order: list[int]
) -> None:
    schema = _schema(load_contract(SHIPPED / "sandbox_export.toml"))
    expected = schema.apply(MINIMAL)
    validated = schema.apply(_spelling(written, order))
    assert validated == expected
    assert _fingerprint(validated) == _fingerprint(expected)
    assert schema.apply(validated) == validated  # validating again changes nothing


@pytest.mark.parametrize(
    ("pattern", "value", "matches"),
    [
        ("^a$", "a", True),
        ("^a$", "a\n", False),  # Python's `$` alone would match here
        ("^(a$|b$)", "b\n", False),
        ("^[$]$", "$", True),  # a `$` inside a class is the character
        (r"^\$$", "$", True),  # so is an escaped one
        ("^[^$]+$", "abc", True),
        ("sha256:", "image@sha256:", True),  # unanchored: a search, as JSON Schema says
    ],
)
def test_a_pattern_reads_dollar_as_the_end_of_the_string_as_ecma_262_does(
    pattern: str, value: str, matches: bool
) -> None:
    schema = compile_schema({"properties": {"v": {"type": "string", "pattern": pattern}}})
    try:
        schema.apply({"v": value})
    except InvalidCommandError:
        assert not matches
    else:
        assert matches
