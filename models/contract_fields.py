"""The typed field reader of contract files: one TOML table, each key read as a checked value.

Every reader raises ContractError naming the file and the dotted field of the
bad value. Checks that span several keys or tables live in the section
builders (``models.contract_sections``).
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Final, TypeVar, overload
from urllib.parse import urlsplit

from jobwarden.models.errors import ContractError
from jobwarden.models.excerpts import names_a_secret

__all__ = [
    "HEADER_NAME",
    "MAX_COUNT",
    "MAX_REQUEST_TIMEOUT_SECONDS",
    "MAX_RESULT_BYTES",
    "MAX_SECONDS",
    "TomlTable",
    "toml_type",
]

# Sanity bounds: anything beyond these is a typo (minutes for seconds, an extra zero).
MAX_SECONDS: Final = 30 * 24 * 3600
MAX_COUNT: Final = 1_000_000
MAX_RESULT_BYTES: Final = 10 * 1024**3
MAX_REQUEST_TIMEOUT_SECONDS: Final = 600

HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+\Z")
_ENV_NAME: Final = re.compile(r"[A-Z_][A-Z0-9_]*\Z")
_PLACEHOLDER: Final = re.compile(r"\{([^{}]*)\}")
_COMMAND_NAME: Final = re.compile(r"command\.[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")

_T = TypeVar("_T")
_E = TypeVar("_E", bound=StrEnum)


class TomlTable:
    """One TOML table and its dotted prefix; each reader raises ContractError on a bad value.

    Readers return None for an absent key (TOML has no null, so absent is the
    only way to say "none"); ``required`` turns that into an error.
    """

    __slots__ = ("data", "file", "prefix", "read")

    def __init__(self, file: str, prefix: str, data: Mapping[str, object]) -> None:
        self.file = file
        self.prefix = prefix
        self.data = data
        self.read: set[str] = set()

    def get(self, key: str) -> object:
        self.read.add(key)
        return self.data.get(key)

    def unread_keys(self, allowed: Iterable[str]) -> list[ContractError]:
        """Allowed keys present in the file that no reader consumed.

        Guards the loader against a field added to models.contract but not
        parsed by a section builder: it must fail loudly rather than drop the value.
        """
        return [
            self.fail(key, "is a contract field this loader does not read yet")
            for key in self.data
            if key in allowed and key not in self.read
        ]

    def fail(self, key: str, problem: str) -> ContractError:
        return ContractError(self.file, f"{self.prefix}.{key}" if self.prefix else key, problem)

    def unknown_keys(self, allowed: Iterable[str]) -> list[ContractError]:
        allowed = sorted(allowed)
        errors = []
        for key in self.data:
            # A bare `key` holds a credential in a contract (not in a provider body, where
            # it often names a record), so it is refused here besides the shared words.
            if key not in allowed and (names_a_secret(key) or key.lower() == "key"):
                errors.append(
                    self.fail(
                        key,
                        "looks like a literal secret; secrets never go in contract files, "
                        "name an environment variable with secret_env "
                        "or a file with secret_file instead",
                    )
                )
            elif key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                errors.append(self.fail(key, f"unknown field{hint}"))
        return errors

    def required(self, key: str, value: _T | None) -> _T:
        if value is None:
            raise self.fail(key, "required")
        return value

    def _typed(self, key: str, cls: type[_T], what: str) -> _T | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, cls):
            raise self.fail(key, f"must be {what}, got {toml_type(value)}")
        return value

    def text(self, key: str) -> str | None:
        value = self._typed(key, str, "a string")
        if value is not None and not value.strip():
            raise self.fail(key, "must not be empty")
        return value

    def boolean(self, key: str, *, default: bool) -> bool:
        value = self._typed(key, bool, "true or false")
        return default if value is None else value

    def choice(self, key: str, options: tuple[str, ...]) -> str | None:
        value = self._typed(key, str, "a string")
        if value is not None and value not in options:
            raise self.fail(key, f"must be one of: {', '.join(options)}; got {value!r}")
        return value

    def enum(self, key: str, enum: type[_E]) -> _E | None:
        value = self.choice(key, tuple(member.value for member in enum))
        return None if value is None else enum(value)

    def url(self, key: str) -> str | None:
        value = self.text(key)
        if value is None:
            return None
        parts = urlsplit(value)
        if parts.username or parts.password:
            # Do not echo the value: it carries a credential.
            raise self.fail(key, "must not carry credentials; use [auth] with secret_env")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise self.fail(key, f"must be an absolute http(s) URL, got {value!r}")
        if parts.query or parts.fragment:
            raise self.fail(key, "must not have a query or fragment")
        if value.endswith("/"):
            raise self.fail(key, "must not end with '/' (every path starts with '/')")
        return value

    def env_name(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None and not _ENV_NAME.match(value):
            # Not echoed: a value that is not a variable name may be the secret itself.
            raise self.fail(
                key,
                "must name an environment variable (upper case letters, digits and '_', "
                "e.g. JOBWARDEN_SANDBOX_TOKEN), not hold a value",
            )
        return value

    def header_name(self, key: str) -> str | None:
        value = self.text(key)
        if value is not None and not HEADER_NAME.match(value):
            raise self.fail(key, f"is not a valid HTTP header name: {value!r}")
        return value

    def pointer(self, key: str) -> str | None:
        value = self._typed(key, str, "a string")
        if value is not None and value and not value.startswith("/"):
            raise self.fail(
                key, f"must be a JSON pointer: empty or starting with '/', got {value!r}"
            )
        return value

    def template(
        self,
        key: str,
        *,
        allowed: tuple[str, ...],
        needed: tuple[str, ...] = (),
        command: bool = False,
    ) -> str | None:
        value = self.text(key)
        if value is None:
            return None
        if not value.startswith("/"):
            raise self.fail(key, f"must start with '/' (it is relative to base_url), got {value!r}")
        if any(ch.isspace() for ch in value):
            raise self.fail(key, "must not contain whitespace")
        names = _PLACEHOLDER.findall(value)
        for name in names:
            if command and _COMMAND_NAME.fullmatch(name):
                continue  # {command.<name>}: filled from the validated command (models/routes)
            if name not in allowed:
                shown = [f"{{{a}}}" for a in allowed] + (["{command.<name>}"] if command else [])
                allowed_text = ", ".join(shown) or "none"
                raise self.fail(key, f"unknown placeholder {{{name}}}; allowed: {allowed_text}")
        if "{" in _PLACEHOLDER.sub("", value) or "}" in _PLACEHOLDER.sub("", value):
            raise self.fail(key, "has an unbalanced '{' or '}'")
        for name in needed:
            if name not in names:
                raise self.fail(key, f"must contain {{{name}}}")
        return value

    def _number(self, key: str) -> float | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(key, f"must be a number, got {toml_type(value)}")
        if not math.isfinite(value):
            raise self.fail(key, f"must be a finite number, got {value}")
        return value

    @overload
    def seconds(
        self, key: str, *, default: float, zero_ok: bool = ..., maximum: float = ...
    ) -> float: ...
    @overload
    def seconds(
        self, key: str, *, default: None = ..., zero_ok: bool = ..., maximum: float = ...
    ) -> float | None: ...
    def seconds(
        self,
        key: str,
        *,
        default: float | None = None,
        zero_ok: bool = False,
        maximum: float = MAX_SECONDS,
    ) -> float | None:
        value = self._number(key)
        if value is None:
            return default
        if zero_ok and value < 0:
            raise self.fail(key, f"must be zero or a positive number, got {value:g}")
        if not zero_ok and value <= 0:
            raise self.fail(key, f"must be a positive number, got {value:g}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum:g} seconds, got {value:g}")
        return float(value)

    @overload
    def fraction(self, key: str, *, default: float) -> float: ...
    @overload
    def fraction(self, key: str, *, default: None = ...) -> float | None: ...
    def fraction(self, key: str, *, default: float | None = None) -> float | None:
        value = self._number(key)
        if value is None:
            return default
        if not 0 <= value <= 1:
            raise self.fail(key, f"must be between 0 and 1, got {value:g}")
        return float(value)

    @overload
    def count(self, key: str, *, default: int, maximum: int = ...) -> int: ...
    @overload
    def count(self, key: str, *, default: None = ..., maximum: int = ...) -> int | None: ...
    def count(
        self, key: str, *, default: int | None = None, maximum: int = MAX_COUNT
    ) -> int | None:
        value = self._number(key)
        if value is None:
            return default
        if not isinstance(value, int):
            raise self.fail(key, f"must be a whole number, got {value:g}")
        if value < 1:
            raise self.fail(key, f"must be a positive whole number, got {value}")
        if value > maximum:
            raise self.fail(key, f"must be at most {maximum}, got {value}")
        return value

    def status_code(self, key: str, *, low: int, high: int) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.fail(key, f"must be an HTTP status code from {low} to {high}, got {value!r}")
        return value

    def status_codes(
        self, key: str, *, default: tuple[int, ...], low: int = 200, high: int = 299
    ) -> tuple[int, ...]:
        value = self._typed(key, list, "an array of HTTP status codes")
        if value is None:
            return default
        if not value:
            raise self.fail(key, "must list at least one status code")
        codes = []
        for index, code in enumerate(value):
            if isinstance(code, bool) or not isinstance(code, int) or not low <= code <= high:
                what = f"{low // 100}xx" if high - low == 99 else f"{low} to {high}"
                raise self.fail(f"{key}[{index}]", f"must be a {what} status code, got {code!r}")
            codes.append(code)
        return tuple(codes)

    def str_list(self, key: str) -> tuple[str, ...] | None:
        value = self._typed(key, list, "an array of strings")
        if value is None:
            return None
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.fail(
                    f"{key}[{index}]",
                    f"must be a string, got {toml_type(item)} "
                    '(write JSON true/false as "true"/"false")',
                )
            if not item:
                raise self.fail(f"{key}[{index}]", "must not be empty")
        return tuple(value)


def toml_type(value: object) -> str:
    """The TOML word for a parsed value's type, for messages."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return f"an integer ({value})"
    if isinstance(value, float):
        return f"a float ({value:g})"
    if isinstance(value, str):
        return f"a string ({value!r})" if len(value) <= 40 else "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return "a date or time"
