"""The field vocabulary of contract files: each kind of value as a pydantic type.

A contract table (``models.contracts.sections``) declares its keys with these types.
Each type is one validator (the TOML value in, the domain value out) and the JSON
Schema an editor checks the same value with (``jobwarden providers schema``). A bad
value raises ``problem(...)``: a pydantic error whose message is ours, worded for the
person editing the file; ``models.contracts.loader`` puts the file and the dotted
field in front of it. Checks that span several keys or tables are the tables' own.

Why plain validators rather than pydantic's built-in types: TOML has no null, bools
are not numbers, and every message must say what was found ("got a float (1.5)")
without echoing a value that may be a secret.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Final, TypeVar
from urllib.parse import urlsplit

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic_core import PydanticCustomError, core_schema

from jobwarden.models.history.excerpts import names_a_secret

__all__ = [
    "HEADER_NAME",
    "MAX_COUNT",
    "MAX_REQUEST_TIMEOUT_SECONDS",
    "MAX_RESULT_BYTES",
    "MAX_SECONDS",
    "EnvName",
    "Flag",
    "Fraction",
    "HeaderName",
    "Kind",
    "Number",
    "Pointer",
    "StrList",
    "Table",
    "Text",
    "Url",
    "check_str_list",
    "choice",
    "choice_of",
    "count",
    "kind",
    "literal_secret",
    "problem",
    "seconds",
    "status_codes",
    "template",
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

_E = TypeVar("_E", bound=StrEnum)


def problem(message: str, *, field: str | None = None, absolute: bool = False) -> Exception:
    """A contract problem for pydantic to carry to the loader.

    Without ``field`` it is about the value being validated; with it, about that key of
    the table (``field="path"``, ``field="[0]"`` for an item), or with ``absolute``
    about a field of another table (``status.result_ref_pointer``).
    """
    # The message travels in the context, not as the template: pydantic would read the
    # braces of "{job_id}" in a message as placeholders of its own.
    context: dict[str, Any] = {"problem": message}
    if field is not None:
        context["field"] = field
        context["absolute"] = absolute
    return PydanticCustomError("contract", "{problem}", context)


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


# eq=False: hashed by identity (typing hashes Annotated metadata; a schema dict cannot be).
@dataclass(frozen=True, slots=True, eq=False)
class Kind:
    """A field type's metadata: ``check`` validates the TOML value (and returns the domain
    value), ``schema`` is the JSON Schema an editor checks the same value with."""

    check: Callable[[Any], Any]
    schema: Mapping[str, Any]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(self.check)

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> dict[str, Any]:
        return dict(self.schema)


def kind(check: Callable[[Any], Any], schema: Mapping[str, Any]) -> Kind:
    """A field type of one table's own: ``check`` and the JSON Schema it enforces."""
    return Kind(check, schema)


def _string(value: object, what: str = "a string") -> str:
    if not isinstance(value, str):
        raise problem(f"must be {what}, got {toml_type(value)}")
    return value


def _text(value: object) -> str:
    text = _string(value)
    if not text.strip():
        raise problem("must not be empty")
    return text


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise problem(f"must be true or false, got {toml_type(value)}")
    return value


def _url(value: object) -> str:
    text = _text(value)
    parts = urlsplit(text)
    if parts.username or parts.password:
        # Do not echo the value: it carries a credential.
        raise problem("must not carry credentials; use [auth] with secret_env")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise problem(f"must be an absolute http(s) URL, got {text!r}")
    if parts.query or parts.fragment:
        raise problem("must not have a query or fragment")
    if text.endswith("/"):
        raise problem("must not end with '/' (every path starts with '/')")
    return text


def _env_name(value: object) -> str:
    text = _text(value)
    if not _ENV_NAME.match(text):
        # Not echoed: a value that is not a variable name may be the secret itself.
        raise problem(
            "must name an environment variable (upper case letters, digits and '_', "
            "e.g. JOBWARDEN_SANDBOX_TOKEN), not hold a value"
        )
    return text


def _header_name(value: object) -> str:
    text = _text(value)
    if not HEADER_NAME.match(text):
        raise problem(f"is not a valid HTTP header name: {text!r}")
    return text


def _pointer(value: object) -> str:
    text = _string(value)
    if text and not text.startswith("/"):
        raise problem(f"must be a JSON pointer: empty or starting with '/', got {text!r}")
    return text


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise problem(f"must be a number, got {toml_type(value)}")
    if not math.isfinite(value):
        raise problem(f"must be a finite number, got {value}")
    return value


def check_str_list(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise problem(f"must be an array of strings, got {toml_type(value)}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise problem(
                f"must be a string, got {toml_type(item)} "
                '(write JSON true/false as "true"/"false")',
                field=f"[{index}]",
            )
        if not item:
            raise problem("must not be empty", field=f"[{index}]")
    return tuple(value)


def _table(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise problem(f"must be a table, got {toml_type(value)}")
    return value


Text = Annotated[str, kind(_text, {"type": "string", "minLength": 1, "pattern": r"\S"})]
Flag = Annotated[bool, kind(_flag, {"type": "boolean"})]
Url = Annotated[
    str,
    kind(
        _url,
        {"type": "string", "format": "uri", "pattern": r"^https?://[^/?#@]+(/[^?#]*[^/?#])?$"},
    ),
]
EnvName = Annotated[str, kind(_env_name, {"type": "string", "pattern": r"^[A-Z_][A-Z0-9_]*$"})]
HeaderName = Annotated[
    str, kind(_header_name, {"type": "string", "pattern": r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$"})
]
# RFC 6901: "" is the whole document, anything else starts with "/".
Pointer = Annotated[str, kind(_pointer, {"type": "string", "pattern": r"^(/.*)?$"})]
Number = Annotated[float, kind(_number, {"type": "number"})]
StrList = Annotated[
    tuple[str, ...],
    kind(check_str_list, {"type": "array", "items": {"type": "string", "minLength": 1}}),
]
Table = Annotated[dict[str, Any], kind(_table, {"type": "object"})]


def choice_of(*values: str) -> Kind:
    """One of a few words, kept as the string."""

    def check(value: object) -> str:
        text = _string(value)
        if text not in values:
            raise problem(f"must be one of: {', '.join(values)}; got {text!r}")
        return text

    return kind(check, {"type": "string", "enum": list(values)})


def choice(enum: type[_E]) -> Kind:
    """One of an enum's values, as the enum member."""
    values = tuple(member.value for member in enum)

    def check(value: object) -> _E:
        text = _string(value)
        if text not in values:
            raise problem(f"must be one of: {', '.join(values)}; got {text!r}")
        return enum(text)

    return kind(check, {"type": "string", "enum": list(values)})


def template(*allowed: str, needed: tuple[str, ...] = (), command: bool = False) -> Kind:
    """A path relative to base_url with {placeholders}: ``allowed`` ones, ``needed`` ones,
    and with ``command`` also {command.<name>} filled from the command (models/routes)."""

    def check(value: object) -> str:
        text = _text(value)
        if not text.startswith("/"):
            raise problem(f"must start with '/' (it is relative to base_url), got {text!r}")
        if any(ch.isspace() for ch in text):
            raise problem("must not contain whitespace")
        names = _PLACEHOLDER.findall(text)
        for name in names:
            if command and _COMMAND_NAME.fullmatch(name):
                continue
            if name not in allowed:
                shown = [f"{{{a}}}" for a in allowed] + (["{command.<name>}"] if command else [])
                raise problem(
                    f"unknown placeholder {{{name}}}; allowed: {', '.join(shown) or 'none'}"
                )
        rest = _PLACEHOLDER.sub("", text)
        if "{" in rest or "}" in rest:
            raise problem("has an unbalanced '{' or '}'")
        for name in needed:
            if name not in names:
                raise problem(f"must contain {{{name}}}")
        return text

    shown = ", ".join(f"{{{name}}}" for name in allowed) or "none"
    needs = f"; must contain {', '.join(f'{{{name}}}' for name in needed)}" if needed else ""
    # No look-ahead for the needed placeholders: Taplo's regex engine has none.
    return kind(
        check,
        {
            "type": "string",
            "pattern": r"^/\S*$",
            "description": f"relative to base_url; placeholders: {shown}"
            + (", {command.<name>}" if command else "")
            + needs,
        },
    )


def seconds(*, zero_ok: bool = False, maximum: float = MAX_SECONDS) -> Kind:
    """A duration in seconds: positive (or zero with ``zero_ok``), at most ``maximum``."""

    def check(value: object) -> float:
        number = _number(value)
        if zero_ok and number < 0:
            raise problem(f"must be zero or a positive number, got {number:g}")
        if not zero_ok and number <= 0:
            raise problem(f"must be a positive number, got {number:g}")
        if number > maximum:
            raise problem(f"must be at most {maximum:g} seconds, got {number:g}")
        return float(number)

    low = {"minimum": 0} if zero_ok else {"exclusiveMinimum": 0}
    return kind(check, {"type": "number", **low, "maximum": maximum})


def _fraction(value: object) -> float:
    number = _number(value)
    if not 0 <= number <= 1:
        raise problem(f"must be between 0 and 1, got {number:g}")
    return float(number)


Fraction = Annotated[float, kind(_fraction, {"type": "number", "minimum": 0, "maximum": 1})]


def count(*, maximum: int = MAX_COUNT) -> Kind:
    """A whole number from 1 to ``maximum``."""

    def check(value: object) -> int:
        number = _number(value)
        if not isinstance(number, int):
            raise problem(f"must be a whole number, got {number:g}")
        if number < 1:
            raise problem(f"must be a positive whole number, got {number}")
        if number > maximum:
            raise problem(f"must be at most {maximum}, got {number}")
        return number

    return kind(check, {"type": "integer", "minimum": 1, "maximum": maximum})


def status_codes(*, low: int = 200, high: int = 299) -> Kind:
    """A non-empty array of HTTP status codes from ``low`` to ``high``."""
    what = f"{low // 100}xx" if high - low == 99 else f"{low} to {high}"

    def check(value: object) -> tuple[int, ...]:
        if not isinstance(value, list):
            raise problem(f"must be an array of HTTP status codes, got {toml_type(value)}")
        if not value:
            raise problem("must list at least one status code")
        for index, code in enumerate(value):
            if isinstance(code, bool) or not isinstance(code, int) or not low <= code <= high:
                raise problem(f"must be a {what} status code, got {code!r}", field=f"[{index}]")
        return tuple(value)

    item = {"type": "integer", "minimum": low, "maximum": high}
    return kind(check, {"type": "array", "minItems": 1, "items": item})


def literal_secret(key: str) -> bool:
    """Whether a key nobody declared looks like it holds a credential.

    A bare ``key`` holds a credential in a contract (not in a provider body, where it
    often names a record), so it is refused here besides the shared words.
    """
    return names_a_secret(key) or key.lower() == "key"
