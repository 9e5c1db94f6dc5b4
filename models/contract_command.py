"""Build a contract's ``[command]`` table: the JSON Schema its commands must satisfy.

Exactly one of two spellings::

    [command]
    schema_file = "sandbox_export.command.schema.json"   # beside the contract

    [command.schema]                                     # or inline, as TOML
    type = "object"
    additionalProperties = false

A schema file is named relative to the contract file and must stay inside its
directory (no absolute path, no ``..``, no symlink out); it is UTF-8 JSON of at
most MAX_SCHEMA_FILE_BYTES, without duplicate keys or NaN. Either schema is
checked by ``models.command_schema.compile_schema``; a problem is a
ContractError naming ``command.schema.<path in the schema>`` or
``command.schema_file``.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any, Final

from jobwarden.models.command_schema import CommandSchema, SchemaDocumentError, compile_schema
from jobwarden.models.contract import CommandSpec
from jobwarden.models.contract_fields import TomlTable, toml_type

__all__ = ["MAX_SCHEMA_FILE_BYTES", "parse_command"]

MAX_SCHEMA_FILE_BYTES: Final = 1024 * 1024


def parse_command(t: TomlTable, directory: Path) -> CommandSpec:
    """The [command] table of a contract in ``directory``; ContractError at its first problem."""
    inline = t.get("schema")
    schema_file = t.text("schema_file")
    if (inline is None) == (schema_file is None):
        raise t.fail(
            "schema",
            "exactly one of schema (an inline [command.schema] table) and schema_file "
            "(a JSON file beside the contract) is required",
        )
    if schema_file is None:
        if not isinstance(inline, dict):
            raise t.fail(
                "schema",
                f"must be a table (the schema inline), got {toml_type(inline)}; "
                "name a file with schema_file instead",
            )
        try:
            return CommandSpec(schema=compile_schema(inline))
        except SchemaDocumentError as exc:
            field = f"schema.{exc.location}" if exc.location else "schema"
            raise t.fail(field, exc.problem) from None
    document = _read_schema_file(t, directory, schema_file)
    return CommandSpec(schema=_compiled_file(t, schema_file, document), schema_file=schema_file)


def _compiled_file(t: TomlTable, schema_file: str, document: object) -> CommandSchema:
    if not isinstance(document, dict):
        raise t.fail("schema_file", f"{schema_file}: must hold a JSON object (the schema)")
    try:
        return compile_schema(document)
    except SchemaDocumentError as exc:
        raise t.fail("schema_file", f"{schema_file}: {exc}") from None


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            # json.loads would keep the last silently; a schema must mean one thing.
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _read_schema_file(t: TomlTable, directory: Path, schema_file: str) -> object:
    relative = PurePosixPath(schema_file)
    if relative.is_absolute() or "\\" in schema_file:
        raise t.fail("schema_file", "must be a path relative to the contract file's directory")
    if ".." in relative.parts:
        raise t.fail("schema_file", "must not leave the contract file's directory ('..')")
    root = directory.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise t.fail("schema_file", "must not leave the contract file's directory (a symlink)")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_SCHEMA_FILE_BYTES + 1)
    except OSError as exc:
        raise t.fail("schema_file", f"{schema_file} cannot be read: {exc.strerror}") from None
    if len(raw) > MAX_SCHEMA_FILE_BYTES:
        raise t.fail("schema_file", f"{schema_file} is larger than {MAX_SCHEMA_FILE_BYTES} bytes")
    try:
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_refuse_duplicates,
            parse_constant=_refuse_constant,
        )
    except UnicodeDecodeError:
        raise t.fail("schema_file", f"{schema_file} is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise t.fail("schema_file", f"{schema_file} is not valid JSON: {exc}") from None
