"""Per-provider command schemas (JSON Schema 2020-12): defaults filled, then the rules enforced.

A contract may name a schema for its command (``[command]``, see
``models.contracts.command``). ``compile_schema`` checks the schema once, at
contract load; ``CommandSchema.apply`` runs at intake, before the fingerprint,
so two spellings of one intent (field order, a default left out or written
out) are one validated command and one fingerprint.

Deliberate departures from plain JSON Schema, each for the fingerprint's sake:

- ``default`` values of ``properties`` are filled in (the jsonschema FAQ's
  extension recipe), recursively: a default object gets its own defaults.
  Filling is a pass of its own before validation, so ``required`` is met by a
  default whatever the keyword order, and defaults are refused at load inside
  ``anyOf``/``oneOf``/``not``/``if``/``then``/``else``/``dependentSchemas``,
  where every branch would be filled whichever one matches.
- ``type: integer`` refuses ``10.0``. JSON Schema counts a number with a zero
  fractional part as an integer, but a decimal point in an amount of minor
  units most often means major units (ten euros), and reading it as ten cents
  is the silent mismatch this check exists to stop.
- ``$ref`` must point into the same document (``#...``): no schema is fetched,
  at load or ever (jsonschema's default would retrieve remote references).
- ``x-jobwarden-immutable-reference: <kind>`` on a ``type: string`` schema makes the
  value an immutable reference of that kind (``models.contracts.references``): a
  branch or tag name is refused like any other mismatch, naming the field. Refused at
  load: an unknown kind, a schema that is not ``type: string``, and the keyword where
  a failure would not name the field or the value could not be shown for sure
  (``anyOf``/``oneOf``/``not``/``if``/``then``/``else``/``dependentSchemas``,
  ``contains``, ``propertyNames``, ``unevaluated*``). ``CommandSchema.references``
  lists a command's references for the approval.

Pure: no I/O; ``apply`` never mutates the caller's command.
"""

from __future__ import annotations

import copy
import math
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from jsonschema.protocols import Validator
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource

from jobwarden.models.contracts.references import (
    IMMUTABLE_REFERENCE,
    ImmutableReference,
    ReferenceKind,
    reference_problem,
)
from jobwarden.models.errors import InvalidCommandError, RefusedInputError
from jobwarden.models.intake.fingerprint import child_path, shown_path

__all__ = ["DRAFT_2020_12", "CommandSchema", "SchemaDocumentError", "compile_schema"]

DRAFT_2020_12: Final = "https://json-schema.org/draft/2020-12/schema"
_REFERENCES: Final = ("$ref", "$dynamicRef")
# Keywords whose value is data, not a schema: never walked for $ref or defaults.
_DATA_KEYWORDS: Final = frozenset({"const", "enum", "default", "examples"})
# Keywords under which a filled default would land whether or not the branch matched.
_BRANCHES: Final = frozenset({"anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas"})
# Keywords whose value maps names (chosen by the schema's author) to schemas.
_NAMED_SCHEMAS: Final = frozenset({"properties", "patternProperties", "$defs", "dependentSchemas"})
# Keywords under which an immutable reference's refusal would not name it (a failed
# branch, "does not contain", "unevaluated ... invalid") nor could the approval be sure
# it applies: the annotation is refused beneath them.
_HIDING: Final = _BRANCHES | {
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
}
_KINDS: Final = ", ".join(kind.value for kind in ReferenceKind)
_SHOWN_PROBLEM: Final = 300
_SHOWN_NAMES: Final = 12


@dataclass(eq=False)
class SchemaDocumentError(RefusedInputError, ValueError):
    """A schema document compile_schema refuses; ``location`` is its dotted path in the schema.

    Never escapes the contract loader, which turns it into a ContractError naming the field.
    """

    template = "{location}: {problem}"

    location: str
    problem: str

    def __str__(self) -> str:
        # The schema's root has no dotted path: the problem is the whole message.
        return super().__str__() if self.location else self.problem


def _is_integer(_checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _ecma_anchors(pattern: str) -> str:
    """``$`` as ECMA-262 reads it (JSON Schema's regex dialect): the end of the input.

    Python's ``$`` also matches before a final newline, so ``^sha256:[0-9a-f]{64}$``
    would let ``"sha256:<hex>\\n"`` through; outside character classes it becomes ``\\Z``.
    """
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "$":
            char = r"\Z"
        out.append(char)
        i += 1
    return "".join(out)


@lru_cache(maxsize=512)
def _regex(pattern: str) -> re.Pattern[str]:
    return re.compile(_ecma_anchors(pattern))


def _pattern(
    validator: Validator, pattern: str, instance: Any, _schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _immutable_reference(
    validator: Validator, kind: str, instance: Any, _schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string"):
        problem = reference_problem(ReferenceKind(kind), instance)
        if problem is not None:
            yield ValidationError(problem)


def _mark_reference(
    validator: Validator, _kind: str, instance: Any, _schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    # Not a failure: each "error" marks where a reference sits (its absolute_path), the
    # one way jsonschema reports the instance path a keyword was applied at.
    if validator.is_type(instance, "string"):
        yield ValidationError("an immutable reference")


# validators.extend has no annotations upstream (jsonschema ships it untyped).
_Strict: Final = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {"pattern": _pattern, IMMUTABLE_REFERENCE: _immutable_reference},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)
_validate_properties: Final = Draft202012Validator.VALIDATORS["properties"]


def _fill_defaults(
    validator: Validator, properties: Mapping[str, Any], instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if isinstance(instance, dict):
        for name, subschema in properties.items():
            if isinstance(subschema, dict) and "default" in subschema and name not in instance:
                # A copy: a default object is filled in turn and must not change the schema.
                instance[name] = copy.deepcopy(subschema["default"])
    yield from _validate_properties(validator, properties, instance, schema)


_Filling: Final = validators.extend(_Strict, {"properties": _fill_defaults})  # type: ignore[no-untyped-call]
_Marking: Final = validators.extend(_Strict, {IMMUTABLE_REFERENCE: _mark_reference})  # type: ignore[no-untyped-call]


def _refuse_retrieval(uri: str) -> Resource[Any]:
    raise NoSuchResource(uri)


# Same-document references resolve without it; anything else fails instead of being fetched.
_REGISTRY: Final[Registry[Any]] = Registry(retrieve=_refuse_retrieval)  # type: ignore[call-arg]


def _location(path: tuple[str | int, ...]) -> str:
    shown = ""
    for part in path:
        shown += f"[{part}]" if isinstance(part, int) else (f".{part}" if shown else str(part))
    return shown


def _check_reference_annotation(
    node: Mapping[str, Any], path: tuple[str | int, ...], hidden: bool
) -> None:
    where = _location((*path, IMMUTABLE_REFERENCE))
    kind = node[IMMUTABLE_REFERENCE]
    if not isinstance(kind, str) or kind not in ReferenceKind.__members__:
        raise SchemaDocumentError(where, f"{kind!r} is not a reference kind; one of: {_KINDS}")
    if node.get("type") != "string":
        raise SchemaDocumentError(
            where, 'marks only a string: the schema beside it must say "type": "string"'
        )
    if hidden:
        raise SchemaDocumentError(
            where,
            "must not sit inside anyOf/oneOf/not/if/then/else/dependentSchemas, contains, "
            "propertyNames or unevaluated*: there a refusal would not name the field, nor "
            "the approval show the reference for sure",
        )


def _walk(node: object, path: tuple[str | int, ...], in_branch: bool, hidden: bool = False) -> None:
    """What check_schema does not refuse: non-JSON values, foreign references, branch
    defaults, immutable-reference annotations jobwarden cannot honour."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            _walk(item, (*path, index), in_branch, hidden)
        return
    if isinstance(node, float) and not math.isfinite(node):
        raise SchemaDocumentError(_location(path), "numbers must be finite")
    if not isinstance(node, dict):
        if node is not None and not isinstance(node, str | int | float):
            raise SchemaDocumentError(
                _location(path), f"{type(node).__name__} is not a JSON value (a TOML date?)"
            )
        return
    if IMMUTABLE_REFERENCE in node:
        _check_reference_annotation(node, path, hidden)
    for key, value in node.items():
        where = (*path, key)
        if key in _REFERENCES and isinstance(value, str) and not value.startswith("#"):
            raise SchemaDocumentError(
                _location(where),
                f"{value!r} is not a reference into this schema (it must start with '#'); "
                "remote and file references are refused: nothing is fetched",
            )
        if key == "$schema" and value != DRAFT_2020_12:
            raise SchemaDocumentError(
                _location(where), f"must be {DRAFT_2020_12!r} (JSON Schema 2020-12), got {value!r}"
            )
        if key == "default" and in_branch and len(path) >= 2 and path[-2] == "properties":
            raise SchemaDocumentError(
                _location(where),
                "a default inside anyOf/oneOf/not/if/then/else/dependentSchemas would be "
                "filled in whichever branch matches; put defaults outside them",
            )
        branch = in_branch or key in _BRANCHES
        hides = hidden or key in _HIDING
        if key in _DATA_KEYWORDS:
            _walk_data(value, where)
        elif key in _NAMED_SCHEMAS and isinstance(value, dict):
            for name, subschema in value.items():
                _walk(subschema, (*where, name), branch, hides)
        else:
            _walk(value, where, branch, hides)


def _walk_data(node: object, path: tuple[str | int, ...]) -> None:
    if isinstance(node, float) and not math.isfinite(node):
        raise SchemaDocumentError(_location(path), "numbers must be finite")
    if isinstance(node, list):
        for index, item in enumerate(node):
            _walk_data(item, (*path, index))
    elif isinstance(node, dict):
        for key, item in node.items():
            _walk_data(item, (*path, key))
    elif node is not None and not isinstance(node, str | int | float):
        raise SchemaDocumentError(
            _location(path), f"{type(node).__name__} is not a JSON value (a TOML date?)"
        )


def _check_defaults(root: Validator, node: object, path: tuple[str | int, ...]) -> None:
    """Every property default must satisfy its own subschema, or each command would fail."""
    if isinstance(node, list):
        for index, item in enumerate(node):
            _check_defaults(root, item, (*path, index))
        return
    if not isinstance(node, dict):
        return
    for key, value in node.items():
        if key in _DATA_KEYWORDS:
            continue
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            for name, subschema in value.items():
                if key == "properties" and isinstance(subschema, dict) and "default" in subschema:
                    error = best_match(
                        root.evolve(schema=subschema).iter_errors(subschema["default"])
                    )
                    if error is not None:
                        where = (*path, key, name, "default")
                        raise SchemaDocumentError(
                            _location(where), f"does not satisfy its own schema: {error.message}"
                        )
                _check_defaults(root, subschema, (*path, key, name))
        else:
            _check_defaults(root, value, (*path, key))


def compile_schema(document: Mapping[str, Any]) -> CommandSchema:
    """Check a command schema and compile it; SchemaDocumentError names the first problem.

    Checked: a JSON object of JSON values, valid JSON Schema 2020-12
    (``Draft202012Validator.check_schema``), references only into itself,
    property defaults that satisfy their own subschemas, none inside branches.
    """
    if not isinstance(document, dict):
        raise SchemaDocumentError("", "must be a JSON object (a schema for the command object)")
    try:
        _walk(document, (), in_branch=False)
        _Strict.check_schema(document)
        schema = CommandSchema(document)
        _check_defaults(schema.strict, document, ())
    except SchemaError as exc:
        raise SchemaDocumentError(_location(tuple(exc.absolute_path)), exc.message) from None
    except RecursionError:
        raise SchemaDocumentError("", "is nested too deeply to check") from None
    return schema


def _shown(path: tuple[str | int, ...]) -> str:
    dotted = ""
    for part in path:
        dotted = f"{dotted}[{part}]" if isinstance(part, int) else child_path(dotted, part)
    return shown_path(dotted)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:_SHOWN_NAMES])
    return shown + (", ..." if len(names) > _SHOWN_NAMES else "")


def _refusal(error: ValidationError) -> InvalidCommandError:
    """The error for one failed keyword, pointing at the field itself where there is one."""
    path: tuple[str | int, ...] = tuple(error.absolute_path)
    problem = error.message
    instance, schema = error.instance, error.schema
    if isinstance(instance, dict) and isinstance(schema, dict):
        known = schema.get("properties", {})
        patterns = schema.get("patternProperties", {})
        if error.validator == "additionalProperties" and error.validator_value is False:
            unknown = sorted(
                key
                for key in instance
                if key not in known and not any(re.search(p, key) for p in patterns)
            )
            if unknown:
                path = (*path, unknown[0])
                problem = (
                    f"unknown field; the schema allows only: {_names(sorted(known))}"
                    if known
                    else "unknown field; the schema allows no fields here"
                )
        elif error.validator == "required" and isinstance(error.validator_value, list):
            missing = [name for name in error.validator_value if name not in instance]
            if missing:
                path, problem = (*path, missing[0]), "is required"
    if len(problem) > _SHOWN_PROBLEM:
        problem = problem[:_SHOWN_PROBLEM] + "..."
    return InvalidCommandError(_shown(path), problem, path)


def _plain(value: Any) -> Any:
    """Mappings as dicts, sequences as lists: jsonschema's "object" is a dict, and a
    stored command may come back read-only."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


class CommandSchema:
    """A checked command schema, compiled once (build it with ``compile_schema``)."""

    __slots__ = ("document", "filling", "marking", "strict")

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self.strict: Validator = _Strict(document, registry=_REGISTRY)
        self.filling: Validator = _Filling(document, registry=_REGISTRY)
        self.marking: Validator = _Marking(document, registry=_REGISTRY)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CommandSchema) and self.document == other.document

    __hash__ = None  # type: ignore[assignment]  # equal by a mutable document

    def __repr__(self) -> str:
        return f"CommandSchema({self.document!r})"

    def __reduce__(self) -> tuple[type[CommandSchema], tuple[Mapping[str, Any]]]:
        # The compiled validators do not pickle; the document compiles again.
        return (CommandSchema, (self.document,))

    def apply(self, command: Mapping[str, Any]) -> dict[str, Any]:
        """The command with its defaults filled in, or InvalidCommandError naming the path.

        Validation runs over the filled copy; the caller's command is not changed.
        """
        filled = copy.deepcopy(dict(command))
        # The first pass only fills defaults; its errors are those of the unfilled command.
        deque(self.filling.iter_errors(filled), maxlen=0)
        error = best_match(self.strict.iter_errors(filled))
        if error is not None:
            raise _refusal(error)
        return filled

    def references(self, command: Mapping[str, Any]) -> tuple[ImmutableReference, ...]:
        """The immutable references in ``command`` (one ``apply`` accepted), in the
        schema's order: what the approval shows beside the request."""
        found: dict[tuple[str | int, ...], ImmutableReference] = {}
        for error in self.marking.iter_errors(_plain(dict(command))):
            kind = error.validator_value
            if error.validator != IMMUTABLE_REFERENCE or not isinstance(error.instance, str):
                continue  # a command apply refused: its other errors are not references
            assert isinstance(kind, str)  # compile_schema checked every kind
            path = tuple(error.absolute_path)
            found.setdefault(
                path,
                ImmutableReference(path=path, value=error.instance, kind=ReferenceKind(kind)),
            )
        return tuple(found.values())
