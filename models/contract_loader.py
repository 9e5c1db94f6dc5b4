"""Load provider contract files (TOML) into validated ``ProviderContract`` values.

One file per provider, named after it (``config/providers/<name>.toml``). The
TOML keys are exactly the field names of the dataclasses in
``models.contract``; one table per concern. Validation happens once, at
start-up, and names the file and the dotted field of every problem found
(``ContractError(file, "create.job_id_pointer", "required when ...")``).
Unknown keys are errors: a typo must never fall back to a default silently.

Pure: reads the files it is given and nothing else (no environment, no
imports of plugins; see ``models.plugins.load_plugin`` for that).

The section builders live in ``models.contract_sections`` and the typed field
reader they share in ``models.contract_fields``; this module reads the files
and assembles the contract.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from typing import Concatenate, Final, ParamSpec, TypeVar
from urllib.parse import urlsplit

from jobwarden.models.concurrency import parse_concurrency
from jobwarden.models.contract import (
    AuthSpec,
    CancelSpec,
    CommandSpec,
    ConcurrencySpec,
    Convention,
    CreateSpec,
    Limits,
    PollPolicy,
    ProviderContract,
    RateLimit,
    ReconciliationSpec,
    ResultSpec,
    StateTable,
    StatusSpec,
    WebhookSpec,
)
from jobwarden.models.contract_command import parse_command
from jobwarden.models.contract_fields import TomlTable, toml_type
from jobwarden.models.contract_sections import (
    TopLevel,
    check_extra_headers,
    parse_auth,
    parse_cancel,
    parse_create,
    parse_limits,
    parse_poll,
    parse_reconciliation,
    parse_result,
    parse_states,
    parse_status,
    parse_top,
    parse_webhook,
)
from jobwarden.models.conventions import AZURE, with_convention_defaults
from jobwarden.models.errors import ContractError
from jobwarden.models.rate_limits import parse_rate_limit

__all__ = [
    "DIRECTORY_FIELD",
    "FILE_FIELD",
    "SHIPPED_CONTRACTS_DIR",
    "check_contracts",
    "effective_base_url",
    "load_contract",
    "load_contracts",
]

# The contracts that ship with jobwarden (config/providers/, a sibling package).
SHIPPED_CONTRACTS_DIR: Final = Path(__file__).resolve().parent.parent / "config" / "providers"

FILE_FIELD: Final = "(file)"  # the field of errors about the file as a whole
DIRECTORY_FIELD: Final = "(directory)"  # the field of errors about the contracts directory

_T = TypeVar("_T")
_P = ParamSpec("_P")


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


# --- one file -----------------------------------------------------------------


def _check_file(path: Path) -> tuple[ProviderContract | None, list[ContractError]]:
    """The contract (when valid) and every problem found, in file order."""
    file = str(path)
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        return None, [ContractError(file, FILE_FIELD, f"not valid TOML: {exc}")]
    except UnicodeDecodeError:
        return None, [ContractError(file, FILE_FIELD, "not valid TOML: the file is not UTF-8")]
    except OSError as exc:
        return None, [ContractError(file, FILE_FIELD, f"cannot be read: {exc.strerror}")]

    errors: list[ContractError] = []

    # Each section stops at its own first problem; the others are still checked,
    # so one run reports a problem per broken section.
    def run(fn: Callable[_P, _T], *args: _P.args, **kwargs: _P.kwargs) -> _T | None:
        try:
            return fn(*args, **kwargs)
        except ContractError as exc:
            errors.append(exc)
            return None

    root = TomlTable(file, "", data)
    top_fields = _field_names(ProviderContract) - {"source_file"}
    errors.extend(root.unknown_keys(top_fields))
    top = run(parse_top, root, path.stem)

    def section(
        key: str,
        spec: type,
        required: bool,
        parse: Callable[Concatenate[TomlTable, _P], _T],
        *args: _P.args,
        **kwargs: _P.kwargs,
    ) -> _T | None:
        value = root.get(key)
        if value is None:
            if required:
                errors.append(ContractError(file, key, "required table is missing"))
            return None
        if not isinstance(value, dict):
            errors.append(ContractError(file, key, f"must be a table, got {toml_type(value)}"))
            return None
        table = TomlTable(file, key, value)
        allowed = _field_names(spec)
        errors.extend(table.unknown_keys(allowed))
        parsed = run(parse, table, *args, **kwargs)
        if parsed is not None:
            errors.extend(table.unread_keys(allowed))
        return parsed

    auth = section("auth", AuthSpec, False, parse_auth)
    # An Azure convention brings its state table (models/conventions.py); a file may still
    # give its own, which then replaces it whole.
    convention = _convention(data, top)
    create = section("create", CreateSpec, True, parse_create, convention)
    status = section("status", StatusSpec, True, parse_status, create, convention)
    states = section("states", StateTable, _plain(convention), parse_states, status)
    cancel = section("cancel", CancelSpec, False, parse_cancel)
    reconciliation = section("reconciliation", ReconciliationSpec, True, parse_reconciliation)
    result = section("result", ResultSpec, False, parse_result, status, convention)
    webhook = section("webhook", WebhookSpec, False, parse_webhook)
    command = section("command", CommandSpec, False, parse_command, path.parent)
    poll = section("poll", PollPolicy, True, parse_poll)
    limits = section("limits", Limits, True, parse_limits)
    concurrency = section("concurrency", ConcurrencySpec, False, parse_concurrency)
    rate_limit = section("rate_limit", RateLimit, False, parse_rate_limit)
    if top is not None:
        run(check_extra_headers, file, top, create, auth)
        errors.extend(root.unread_keys(top_fields))

    if (
        errors
        or top is None
        or create is None
        or status is None
        or (states is None and convention not in AZURE)
        or reconciliation is None
        or poll is None
        or limits is None
    ):
        return None, errors
    contract = ProviderContract(
        name=top.name,
        source_file=file,
        base_url=top.base_url,
        base_url_env=top.base_url_env,
        requires_approval=top.requires_approval,
        plugin=top.plugin,
        extra_headers=top.extra_headers,
        auth=auth,
        create=create,
        status=status,
        states=states or _NO_STATES,
        cancel=cancel,
        reconciliation=reconciliation,
        result=result,
        webhook=webhook,
        command=command,
        poll=poll,
        limits=limits,
        concurrency=concurrency,
        rate_limit=rate_limit,
        convention=top.convention,
    )
    return with_convention_defaults(contract, states_given="states" in data), []


# Replaced by the convention's table (with_convention_defaults) before anyone reads it.
_NO_STATES: Final = StateTable(pending=frozenset(), succeeded=frozenset(), failed=frozenset())


def _plain(convention: Convention | None) -> bool:
    """Whether the file must describe its states itself: not under an Azure convention,
    and not when its convention is broken (that error is the one reported)."""
    return convention is not None and convention not in AZURE


def _convention(data: Mapping[str, object], top: TopLevel | None) -> Convention | None:
    """The file's convention; None when the top level could not say (its own error is
    reported there, and no table is then held to rules that depend on it)."""
    if top is not None:
        return top.convention
    raw = data.get("convention", Convention.plain.value)
    return Convention(raw) if raw in {c.value for c in Convention} else None


def _field_names(spec: type) -> set[str]:
    return {f.name for f in fields(spec)}
