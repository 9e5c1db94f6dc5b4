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
checked by ``models.contracts.command_schema.compile_schema``; a problem is a
ContractError naming ``command.schema.<path in the schema>`` or
``command.schema_file``.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any, Final, Self

from pydantic import Field, PrivateAttr, ValidationInfo, model_validator

from jobwarden.models.contracts.command_schema import (
    CommandSchema,
    SchemaDocumentError,
    compile_schema,
)
from jobwarden.models.contracts.contract import CommandSpec
from jobwarden.models.contracts.fields import Table, Text, problem
from jobwarden.models.contracts.sections import ContractTable

__all__ = ["MAX_SCHEMA_FILE_BYTES", "CommandTable"]

MAX_SCHEMA_FILE_BYTES: Final = 1024 * 1024


class CommandTable(ContractTable):
    """The JSON Schema every command of this provider must satisfy (inline or in a file)."""

    builds = CommandSpec
    inline: Table | None = Field(default=None, alias="schema")
    """The schema inline, as TOML ([command.schema])."""
    schema_file: Text | None = None
    """A JSON file beside the contract holding the schema."""
    _compiled: CommandSchema | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        if (self.inline is None) == (self.schema_file is None):
            raise problem(
                "exactly one of schema (an inline [command.schema] table) and schema_file "
                "(a JSON file beside the contract) is required",
                field="schema",
            )
        if self.inline is not None:
            try:
                self._compiled = compile_schema(self.inline)
            except SchemaDocumentError as exc:
                field = f"schema.{exc.location}" if exc.location else "schema"
                raise problem(exc.problem, field=field) from None
            return self
        assert self.schema_file is not None
        directory: Path = (info.context or {})["directory"]
        document = _read_schema_file(directory, self.schema_file)
        self._compiled = _compiled_file(self.schema_file, document)
        return self

    def spec(self) -> CommandSpec:
        assert self._compiled is not None  # set by the validator
        return CommandSpec(schema=self._compiled, schema_file=self.schema_file)


def _compiled_file(schema_file: str, document: object) -> CommandSchema:
    if not isinstance(document, dict):
        raise problem(f"{schema_file}: must hold a JSON object (the schema)", field="schema_file")
    try:
        return compile_schema(document)
    except SchemaDocumentError as exc:
        raise problem(f"{schema_file}: {exc}", field="schema_file") from None


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


def _fail(message: str) -> Exception:
    return problem(message, field="schema_file")


def _read_schema_file(directory: Path, schema_file: str) -> object:
    relative = PurePosixPath(schema_file)
    if relative.is_absolute() or "\\" in schema_file:
        raise _fail("must be a path relative to the contract file's directory")
    if ".." in relative.parts:
        raise _fail("must not leave the contract file's directory ('..')")
    root = directory.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise _fail("must not leave the contract file's directory (a symlink)")
    try:
        with path.open("rb") as fh:
            raw = fh.read(MAX_SCHEMA_FILE_BYTES + 1)
    except OSError as exc:
        raise _fail(f"{schema_file} cannot be read: {exc.strerror}") from None
    if len(raw) > MAX_SCHEMA_FILE_BYTES:
        raise _fail(f"{schema_file} is larger than {MAX_SCHEMA_FILE_BYTES} bytes")
    try:
        return json.loads(
            raw.decode("utf-8"),
            object_pairs_hook=_refuse_duplicates,
            parse_constant=_refuse_constant,
        )
    except UnicodeDecodeError:
        raise _fail(f"{schema_file} is not UTF-8") from None
    except (ValueError, RecursionError) as exc:
        raise _fail(f"{schema_file} is not valid JSON: {exc}") from None
