"""The published JSON Schema of contract files agrees with the loader (issue 18).

``jobwarden providers schema`` prints ``contract_json_schema()``; an editor (Taplo /
Even Better TOML) checks a contract against it as it is typed. Every shipped contract
must pass it, and what the loader refuses for a key's shape the schema refuses too,
at the same field.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest

from jobwarden.models.contracts.loader import (
    SHIPPED_CONTRACTS_DIR,
    check_contracts,
    contract_json_schema,
)

REPO = Path(__file__).resolve().parents[2]
VALID = Path(__file__).parent / "contracts" / "valid"
SANDBOX_TEXT = (SHIPPED_CONTRACTS_DIR / "sandbox.toml").read_text()
CONTRACT_FILES = sorted([*SHIPPED_CONTRACTS_DIR.glob("*.toml"), *VALID.glob("*.toml")])


def _validator() -> jsonschema.Draft202012Validator:
    schema = contract_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _dotted(error: jsonschema.ValidationError) -> str:
    """The field a schema error is about, spelt as the loader spells it."""
    path = ".".join(str(part) for part in error.absolute_path)
    if error.validator == "additionalProperties":
        # The unknown key is in the message, not the path: "'x' was unexpected".
        extra = error.message.split("'")[1]
        return f"{path}.{extra}" if path else extra
    if error.validator == "required":
        missing = error.message.split("'")[1]
        return f"{path}.{missing}" if path else missing
    return path


@pytest.mark.parametrize("path", CONTRACT_FILES, ids=lambda p: p.name)
def test_every_shipped_and_fixture_contract_passes_the_published_schema(path: Path) -> None:
    data = tomllib.loads(path.read_text())
    errors = [f"{_dotted(e)}: {e.message}" for e in _validator().iter_errors(data)]
    assert errors == []


def test_the_committed_schema_is_the_one_the_code_prints() -> None:
    # .taplo.toml points editors at this file; it must not drift from the models.
    committed = json.loads((REPO / "docs" / "contract.schema.json").read_text())
    assert committed == contract_json_schema(), (
        "run: jobwarden providers schema > docs/contract.schema.json"
    )


# (old text in sandbox.toml, new text, the field both the schema and the loader name)
SHAPE_RULES = [
    ("[limits]", "[limits]\nmax_status_request = 3", "limits.max_status_request"),
    ("[reconciliation]", "[reconciliations]", "reconciliations"),
    ('token_placement = "header"', 'token_placement = "cookie"', "create.token_placement"),
    ("jitter_floor = 0.5", "jitter_floor = 1.5", "poll.jitter_floor"),
    ("max_seconds = 5", 'max_seconds = "5"', "poll.max_seconds"),
    ('job_id_pointer = "/id"', 'job_id_pointer = "id"', "create.job_id_pointer"),
    ("max_rate_limited = 5", "max_rate_limited = 0", "poll.max_rate_limited"),
    ("requires_approval = false", 'requires_approval = "no"', "requires_approval"),
    ('base_url = "http://127.0.0.1:8765"', 'base_url = "127.0.0.1:8765"', "base_url"),
    ('path = "/v1/jobs"', 'path = "v1/jobs"', "create.path"),
    ("in_flight_statuses = [409]", "in_flight_statuses = [200]", "create.in_flight_statuses.0"),
    ('scheme = "bearer"', 'scheme = "basic"', "auth.scheme"),
    ("rate_limit_base_seconds = 1\n", "", "poll.rate_limit_base_seconds"),
]


@pytest.mark.parametrize(("old", "new", "field"), SHAPE_RULES)
def test_what_the_loader_refuses_the_schema_refuses_at_the_same_field(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    assert old in SANDBOX_TEXT
    text = SANDBOX_TEXT.replace(old, new, 1)
    schema_fields = {_dotted(e) for e in _validator().iter_errors(tomllib.loads(text))}
    assert field in schema_fields
    (tmp_path / "sandbox.toml").write_text(text)
    _, errors = check_contracts(tmp_path)
    # The loader's spelling of an item is field[0], the schema's path field.0.
    loader_fields = {e.field.replace("[", ".").replace("]", "") for e in errors}
    assert field in loader_fields
    # One mistake, one error line (a misspelt required table also reports it missing).
    assert len(errors) == (2 if field == "reconciliations" else 1), errors


def test_the_schema_documents_each_table_for_the_editor() -> None:
    schema = contract_json_schema()
    tables = schema["$defs"]
    for key, ref in schema["properties"].items():
        target = ref.get("$ref") or next(
            (branch["$ref"] for branch in ref.get("anyOf", []) if "$ref" in branch), None
        )
        if target is not None:
            name = target.rsplit("/", 1)[1]
            assert tables[name].get("description"), key
            assert tables[name]["additionalProperties"] is False, key
    # TOML has no null: no key may be offered null as a value.
    assert '"null"' not in json.dumps(schema)
    assert set(schema["required"]) >= {"name", "base_url", "create", "status", "limits"}
