"""A contract's [command] table: the command's JSON Schema, inline or in a file beside the
contract, checked at load with errors naming the file and the field. No servers, no network.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from jobwarden.models.contracts.command import MAX_SCHEMA_FILE_BYTES
from jobwarden.models.contracts.loader import check_contracts, load_contract
from jobwarden.models.errors import ContractError, InvalidCommandError

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
SANDBOX = (SHIPPED / "sandbox.toml").read_text()
DOCS = Path(__file__).resolve().parents[2] / "docs" / "contracts.md"


def _contract(directory: Path, command_table: str, name: str = "sandbox") -> Path:
    """The shipped sandbox contract with a [command] table, saved in ``directory``."""
    path = directory / f"{name}.toml"
    text = SANDBOX.replace('name = "sandbox"', f'name = "{name}"')
    path.write_text(text.replace("[create]\n", f"{command_table}\n[create]\n", 1))
    return path


def _refused(path: Path, field: str, problem: str) -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert (caught.value.file, caught.value.field) == (str(path), field)
    assert problem in caught.value.problem, caught.value.problem


def test_the_inline_example_in_the_docs_loads_and_refuses_a_float_amount(tmp_path: Path) -> None:
    example = re.search(r"# or inline:\n(.*?)```", DOCS.read_text(), flags=re.S)
    assert example is not None
    contract = load_contract(_contract(tmp_path, example.group(1)))
    assert contract.command is not None and contract.command.schema_file is None
    schema = contract.command.schema
    assert schema.apply({"amount": 1050, "currency": "EUR"}) == {"amount": 1050, "currency": "EUR"}
    with pytest.raises(InvalidCommandError, match=re.escape("command.amount: 10.1 is not of type")):
        schema.apply({"amount": 10.1, "currency": "EUR"})


def test_a_schema_file_beside_the_contract_is_read_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "cmd.json").write_text('{"properties": {"n": {"default": 3}}}')
    contract = load_contract(_contract(tmp_path, '[command]\nschema_file = "schemas/cmd.json"'))
    assert contract.command is not None
    assert contract.command.schema_file == "schemas/cmd.json"
    assert contract.command.schema.apply({}) == {"n": 3}


@pytest.mark.parametrize(
    ("table", "field", "problem"),
    [
        (
            '[command.schema.properties.amount]\ntype = "integr"',
            "command.schema.properties.amount.type",
            "is not valid under any of the given schemas",
        ),
        (
            '[command.schema.properties.amount]\n"$ref" = "https://schemas.example.com/a.json"',
            "command.schema.properties.amount.$ref",
            "remote and file references are refused: nothing is fetched",
        ),
        (
            '[command.schema.properties.amount]\ntype = "integer"\ndefault = 10.5',
            "command.schema.properties.amount.default",
            "does not satisfy its own schema",
        ),
        (
            "[command.schema.properties.at]\ndefault = 2024-05-01T12:00:00Z",
            "command.schema.properties.at.default",
            "is not a JSON value",
        ),
        ("[command]\nschema = 3", "command.schema", "must be a table"),
        ("[command]", "command.schema", "exactly one of schema"),
        (
            '[command]\nschema_file = "a.json"\n[command.schema]\ntype = "object"',
            "command.schema",
            "exactly one of schema",
        ),
        ('[command]\nschema_fil = "a.json"', "command.schema_fil", "did you mean 'schema_file'"),
        ('[command]\nschema_file = "/etc/cmd.json"', "command.schema_file", "must be a path"),
        (
            '[command]\nschema_file = "../cmd.json"',
            "command.schema_file",
            "must not leave the contract file's directory",
        ),
        ('[command]\nschema_file = "missing.json"', "command.schema_file", "cannot be read"),
    ],
)
def test_a_bad_command_table_is_refused_at_load_naming_the_field(
    tmp_path: Path, table: str, field: str, problem: str
) -> None:
    _refused(_contract(tmp_path, table), field, problem)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"type": "object", "type": "array"}', "duplicate key 'type'"),
        (b'{"maximum": NaN}', "NaN is not JSON"),
        (b"{not json", "is not valid JSON"),
        (b"\xff\xfe", "is not UTF-8"),
        (b"[]", "must hold a JSON object"),
        (b'{"properties": {"a": {"$ref": "other.json"}}}', "properties.a.$ref"),
        (b'{"$schema": "http://json-schema.org/draft-07/schema#"}', "$schema: must be"),
    ],
)
def test_a_bad_schema_file_is_refused_naming_the_file_and_the_place_in_it(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    (tmp_path / "cmd.json").write_bytes(content)
    path = _contract(tmp_path, '[command]\nschema_file = "cmd.json"')
    _refused(path, "command.schema_file", "cmd.json")
    _refused(path, "command.schema_file", problem)


def test_a_schema_file_larger_than_the_bound_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cmd.json").write_text('{"description": "' + "x" * MAX_SCHEMA_FILE_BYTES + '"}')
    _refused(
        _contract(tmp_path, '[command]\nschema_file = "cmd.json"'),
        "command.schema_file",
        f"larger than {MAX_SCHEMA_FILE_BYTES} bytes",
    )


def test_a_symlink_out_of_the_contract_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.json"
    outside.write_text('{"type": "object"}')
    contracts = tmp_path / "providers"
    contracts.mkdir()
    os.symlink(outside, contracts / "cmd.json")
    _refused(
        _contract(contracts, '[command]\nschema_file = "cmd.json"'),
        "command.schema_file",
        "must not leave the contract file's directory (a symlink)",
    )


def test_a_broken_command_table_is_one_problem_among_the_others_of_the_file(
    tmp_path: Path,
) -> None:
    path = _contract(tmp_path, '[command.schema]\ntype = "objekt"')
    path.write_text(path.read_text().replace("jitter_floor = 0.5", "jitter_floor = 1.5"))
    _, errors = check_contracts(tmp_path)
    assert sorted(e.field for e in errors) == ["command.schema.type", "poll.jitter_floor"]
