"""Load provider contract files (TOML) into validated ``ProviderContract`` values.

One file per provider, named after it (``config/providers/<name>.toml``). The
TOML keys are exactly the field names of the dataclasses in
``models.contracts.contract``; one table per concern. Validation happens once, at
start-up, and names the file and the dotted field of every problem found
(``ContractError(file, "create.job_id_pointer", "required when ...")``).
Unknown keys are errors: a typo must never fall back to a default silently.

Pure: reads the files it is given and nothing else (no environment, no
imports of plugins; see ``models.contracts.plugins.load_plugin`` for that).

The section builders live in ``models.contracts.sections`` and the typed field
reader they share in ``models.contracts.fields``; this module reads the files
and assembles the contract.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Final, TypeVar, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError, create_model
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema

from jobwarden.models.concurrency import ConcurrencyTable
from jobwarden.models.contracts.command import CommandTable
from jobwarden.models.contracts.contract import Convention, FollowUpSpec, ProviderContract
from jobwarden.models.contracts.fields import literal_secret, toml_type
from jobwarden.models.contracts.follow_ups import (
    FollowUpTable,
    check_follow_up_targets,
    check_names,
)
from jobwarden.models.contracts.job import CreateTable, StatesTable, StatusTable
from jobwarden.models.contracts.result import ResultTable
from jobwarden.models.contracts.sections import (
    AuthTable,
    CancelTable,
    CleanupTable,
    ContractTable,
    LimitsTable,
    PollTable,
    ReconciliationTable,
    TopLevel,
    WebhookTable,
    check_extra_headers,
)
from jobwarden.models.conventions.tables import with_convention_tables
from jobwarden.models.errors import ContractError
from jobwarden.models.provider.breaker import BreakerTable
from jobwarden.models.provider.rate_limits import RateLimitTable

__all__ = [
    "DIRECTORY_FIELD",
    "FILE_FIELD",
    "SECTIONS",
    "SHIPPED_CONTRACTS_DIR",
    "ContractFile",
    "check_contracts",
    "contract_json_schema",
    "effective_base_url",
    "load_contract",
    "load_contract_text",
    "load_contracts",
]

# The contracts that ship with jobwarden (config/providers/, a sibling package).
SHIPPED_CONTRACTS_DIR: Final = Path(__file__).resolve().parents[2] / "config" / "providers"

FILE_FIELD: Final = "(file)"  # the field of errors about the file as a whole
DIRECTORY_FIELD: Final = "(directory)"  # the field of errors about the contracts directory


def load_contract(path: Path) -> ProviderContract:
    """Parse and validate one contract file.

    Raises ContractError naming the file and the dotted field of the first
    problem (the field is ``(file)`` when the file cannot be read or parsed).
    """
    contract, errors = _check_file(path)
    if errors:
        raise errors[0]
    assert contract is not None  # no errors means every section was built
    return contract


def load_contract_text(text: str, path: Path) -> ProviderContract:
    """Parse and validate a contract's text as if it were the file ``path``.

    For a contract kept by digest (models/contracts/pins.py): ``path`` names the
    provider's file, whose directory resolves what the text refers to. Raises
    ContractError like ``load_contract``.
    """
    contract, errors = _check_file(path, text)
    if errors:
        raise errors[0]
    assert contract is not None  # no errors means every section was built
    return contract


def check_contracts(
    directory: Path,
) -> tuple[dict[str, ProviderContract], list[ContractError]]:
    """Validate every ``*.toml`` in ``directory``; never raises ContractError.

    Returns the valid contracts by name and every problem found in every file
    (a file may contribute several). A missing directory, or one without
    contract files, is a single error with the field ``(directory)``.
    """
    if not directory.is_dir():
        problem = "is not a directory" if directory.exists() else "does not exist"
        return {}, [ContractError(str(directory), DIRECTORY_FIELD, problem)]
    paths = sorted(directory.glob("*.toml"))
    if not paths:
        return {}, [
            ContractError(str(directory), DIRECTORY_FIELD, "holds no *.toml contract files")
        ]
    contracts: dict[str, ProviderContract] = {}
    errors: list[ContractError] = []
    for path in paths:
        contract, file_errors = _check_file(path)
        errors.extend(file_errors)
        if contract is not None:
            contracts[contract.name] = contract
    # What no file can tell alone: each follow-up names a contract of this directory.
    for name, contract in sorted(contracts.items()):
        found = check_follow_up_targets(name, contract.follow_ups, contracts, contract.source_file)
        if found:
            errors.extend(found)
            del contracts[name]
    return contracts, errors


def load_contracts(directory: Path) -> dict[str, ProviderContract]:
    """All contracts in ``directory`` by name, or ContractError if any is invalid.

    With exactly one problem that error is raised as is; with several, one
    ContractError for the directory whose problem lists them all.
    """
    contracts, errors = check_contracts(directory)
    if len(errors) == 1:
        raise errors[0]
    if errors:
        listing = "; ".join(str(error) for error in errors)
        raise ContractError(
            str(directory), DIRECTORY_FIELD, f"{len(errors)} contract problems: {listing}"
        )
    return contracts


def effective_base_url(contract: ProviderContract, environ: Mapping[str, str]) -> str:
    """The base URL to use: ``environ[base_url_env]`` when set and non-empty, else base_url.

    Raises ContractError (field ``base_url_env``) when the override is not an
    absolute http(s) URL; the value itself is not echoed.
    """
    if contract.base_url_env is None:
        return contract.base_url
    override = environ.get(contract.base_url_env, "").strip()
    if not override:
        return contract.base_url
    parts = urlsplit(override)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.password:
        raise ContractError(
            contract.source_file,
            "base_url_env",
            f"environment variable {contract.base_url_env} must hold an absolute http(s) URL",
        )
    return override.rstrip("/")


# [follow_ups.<name>]: keyed by the follow-up's name, each one a FollowUpTable.
FOLLOW_UPS: Final = "follow_ups"

# --- one file -----------------------------------------------------------------

# Every table a file may hold, in the order they are validated (a table's rules may
# read the ones before it), and whether a file must have it. [states] is required
# (a convention may supply it: models/conventions/tables.py).
SECTIONS: Final[dict[str, tuple[type[ContractTable], bool]]] = {
    "auth": (AuthTable, False),
    "create": (CreateTable, True),
    "status": (StatusTable, True),
    "states": (StatesTable, True),
    "cancel": (CancelTable, False),
    "cleanup": (CleanupTable, False),
    "reconciliation": (ReconciliationTable, True),
    "result": (ResultTable, False),
    "webhook": (WebhookTable, False),
    "command": (CommandTable, False),
    "poll": (PollTable, True),
    "limits": (LimitsTable, True),
    "concurrency": (ConcurrencyTable, False),
    "rate_limit": (RateLimitTable, False),
    "breaker": (BreakerTable, False),
}


def _check_file(
    path: Path, text: str | None = None
) -> tuple[ProviderContract | None, list[ContractError]]:
    """The contract (when valid) and every problem found, in file order; ``text``: the
    file's contents as given, instead of reading ``path``."""
    file = str(path)
    try:
        if text is not None:
            data = tomllib.loads(text)
        else:
            with path.open("rb") as fh:
                data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        return None, [ContractError(file, FILE_FIELD, f"not valid TOML: {exc}")]
    except UnicodeDecodeError:
        return None, [ContractError(file, FILE_FIELD, "not valid TOML: the file is not UTF-8")]
    except OSError as exc:
        return None, [ContractError(file, FILE_FIELD, f"cannot be read: {exc.strerror}")]

    top_keys = {
        key: value for key, value in data.items() if key not in SECTIONS and key != FOLLOW_UPS
    }
    top, errors = _validate(file, "", TopLevel, top_keys, {"stem": path.stem})
    # What the convention supplies is merged in first and then judged like the file's own
    # keys (models/conventions/tables.py); the file's own keys and whole tables win.
    convention = _convention(data, top)
    data = with_convention_tables(data, convention)
    # Each table stops at its own first problem; the others are still checked, so one run
    # reports a problem per broken table.
    built: dict[str, Any] = {}
    for key, (model, required) in SECTIONS.items():
        raw = data.get(key)
        if raw is None:
            # A broken convention may be the one that would have supplied the table.
            if required and (key != "states" or convention is not None):
                errors.append(ContractError(file, key, "required table is missing"))
            continue
        if not isinstance(raw, dict):
            errors.append(ContractError(file, key, f"must be a table, got {toml_type(raw)}"))
            continue
        context = {
            "convention": convention,
            "directory": path.parent,
            "create": built.get("create"),
            "status": built.get("status"),
        }
        table, problems = _validate(file, key, model, raw, context)
        errors.extend(problems)
        if table is not None:
            built[key] = table.spec()
    follow_ups, problems = _follow_ups(file, data.get(FOLLOW_UPS))
    errors.extend(problems)
    if top is not None:
        try:
            check_extra_headers(file, top, built.get("create"), built.get("auth"))
        except ContractError as exc:
            errors.append(exc)

    needed = [key for key, (_, must) in SECTIONS.items() if must]
    if errors or top is None or any(key not in built for key in needed):
        return None, errors
    contract = ProviderContract(
        name=top.name,
        source_file=file,
        base_url=top.base_url,
        base_url_env=top.base_url_env,
        # Two approvers imply approval: the key alone is enough to say so.
        requires_approval=top.requires_approval or top.approvals_required > 1,
        approvals_required=top.approvals_required,
        plugin=top.plugin,
        extra_headers=top.extra_headers,
        convention=top.convention,
        follow_ups=follow_ups,
        **built,
    )
    return contract, []


def _follow_ups(file: str, raw: object) -> tuple[dict[str, FollowUpSpec], list[ContractError]]:
    """``[follow_ups.<name>]``, each validated as a table of its own (one problem each)."""
    if raw is None:
        return {}, []
    if not isinstance(raw, dict):
        return {}, [ContractError(file, FOLLOW_UPS, f"must be a table, got {toml_type(raw)}")]
    errors = check_names(file, raw)
    specs: dict[str, FollowUpSpec] = {}
    for name, table in raw.items():
        prefix = f"{FOLLOW_UPS}.{name}"
        if not isinstance(table, dict):
            errors.append(ContractError(file, prefix, f"must be a table, got {toml_type(table)}"))
            continue
        model, problems = _validate(file, prefix, FollowUpTable, table, {})
        errors.extend(problems)
        if model is not None:
            specs[name] = replace(model.spec(), name=name)
    return specs, errors


_M = TypeVar("_M", bound=BaseModel)


def _validate(
    file: str,
    prefix: str,
    model: type[_M],
    raw: Mapping[str, object],
    context: Mapping[str, object],
) -> tuple[_M | None, list[ContractError]]:
    """The table validated, or None with its problems: every unknown key (each may be a
    typo of a key the table then misses) and the first other problem."""
    try:
        return model.model_validate(raw, context=context), []
    except ValidationError as exc:
        found = [_contract_error(file, prefix, model, error) for error in exc.errors()]
    unknown = [error for kind, _, error in found if kind == "extra_forbidden"]
    others = [error for kind, _, error in found if kind != "extra_forbidden"]
    stray = {loc[0] for kind, loc, _ in found if kind == "extra_forbidden" and len(loc) == 1}
    if stray and not others:
        # pydantic checks the rules that span keys only once every key is valid: the
        # table without its unknown keys tells whether one was a typo of a needed key.
        known = {key: value for key, value in raw.items() if key not in stray}
        _, others = _validate(file, prefix, model, known, context)
    return None, unknown + others[:1]


def _contract_error(
    file: str, prefix: str, model: type[BaseModel], error: ErrorDetails
) -> tuple[str, tuple[str, ...], ContractError]:
    """One pydantic error as a ContractError naming the dotted field, worded for the file."""
    loc = tuple(str(part) for part in error["loc"])
    field = ".".join(part for part in (prefix, *loc) if part)
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "contract":
        problem = str(ctx["problem"])
        named = ctx.get("field")
        if named is not None and ctx.get("absolute"):
            field = str(named)
        elif named is not None:
            field = (
                f"{field}{named}"
                if str(named).startswith("[") or not field
                else (f"{field}.{named}")
            )
        return kind, loc, ContractError(file, field, problem)
    if kind == "extra_forbidden":
        allowed = _keys_at(model, loc[:-1])
        if not prefix and not loc[:-1]:
            allowed = (*allowed, *SECTIONS, FOLLOW_UPS)
        return kind, loc, ContractError(file, field, _unknown_key(loc[-1], allowed))
    if kind == "missing":
        return kind, loc, ContractError(file, field, "required")
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return (
            kind,
            loc,
            ContractError(file, field, f"must be a table, got {toml_type(error['input'])}"),
        )
    return kind, loc, ContractError(file, field, error["msg"])


def _unknown_key(key: str, allowed: tuple[str, ...]) -> str:
    if literal_secret(key):
        return (
            "looks like a literal secret; secrets never go in contract files, "
            "name an environment variable with secret_env or a file with secret_file instead"
        )
    close = difflib.get_close_matches(key, sorted(allowed), n=1)
    return "unknown field" + (f"; did you mean {close[0]!r}?" if close else "")


def _keys_at(model: type[BaseModel], loc: tuple[str, ...]) -> tuple[str, ...]:
    """The keys a table nested at ``loc`` inside ``model`` allows ([create.routes.<name>])."""
    current: type[BaseModel] | None = model
    parts = list(loc)
    while parts and current is not None:
        fields_by_key = {f.alias or name: f for name, f in current.model_fields.items()}
        info = fields_by_key.get(parts.pop(0))
        current, keyed = _nested_table(info.annotation if info is not None else None)
        if keyed and parts:
            parts.pop(0)  # the route's name
    if current is None:
        return ()
    return tuple(f.alias or name for name, f in current.model_fields.items())


def _nested_table(annotation: object) -> tuple[type[BaseModel] | None, bool]:
    """The table model inside a field's type, and whether it is keyed (dict[str, Model])."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in get_args(annotation):
        inner, _ = _nested_table(arg)
        if inner is not None:
            return inner, get_origin(annotation) is dict
    return None, False


def _convention(data: Mapping[str, object], top: TopLevel | None) -> Convention | None:
    """The file's convention; None when the top level could not say (its own error is
    reported there, and no table is then held to rules that depend on it)."""
    if top is not None:
        return top.convention
    raw = data.get("convention", Convention.plain.value)
    return Convention(raw) if raw in {c.value for c in Convention} else None


# --- the published schema ------------------------------------------------------------

ContractFile: Final = create_model(
    "ProviderContractFile",
    __base__=TopLevel,
    __doc__="A jobwarden provider contract (config/providers/<name>.toml); docs/contracts.md.",
    **{  # type: ignore[call-overload]  # create_model's field keywords are not typed per key
        key: (model, ...) if needed and key != "states" else (model | None, None)
        for key, (model, needed) in SECTIONS.items()
    },
    follow_ups=(dict[str, FollowUpTable] | None, None),
)


class _TomlSchema(GenerateJsonSchema):
    """JSON Schema of what a TOML file can hold: TOML has no null, so an optional key is
    one that may be left out, never one whose value may be null."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        generated = super().default_schema(schema)
        if generated.get("default", 0) is None:
            del generated["default"]
        return generated


def contract_json_schema() -> dict[str, Any]:
    """The JSON Schema of contract files, for editors (Taplo / Even Better TOML) and CI."""
    schema = ContractFile.model_json_schema(schema_generator=_TomlSchema)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
