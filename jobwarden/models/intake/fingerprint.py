"""Request fingerprints: sha256 over RFC 8785 canonical JSON.

The fingerprint binds an idempotency key (and an approval) to exactly one
request: same key with a different fingerprint is a conflict, never a replay.
canonical_command refuses, as InvalidSubmissionError, anything RFC 8785
cannot canonicalise or the bounds forbid; it never raises anything else.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Final

from jobwarden.models.canonical import dumps as canonical_json
from jobwarden.models.errors import InvalidSubmissionError

MAX_COMMAND_BYTES: Final = 64 * 1024
MAX_DEPTH: Final = 32
# RFC 8785 numbers are IEEE doubles: integers beyond this would be rounded, so it refuses them.
EXACT_INTEGER: Final = 2**53 - 1
_SHOWN_KEY = 40
_SHOWN_PATH = 60


def show_key(key: str) -> str:
    """A key as it may appear in a one-line error: quoted, escaped to ASCII, cut short."""
    shown = ascii(key[:_SHOWN_KEY])
    return shown[:_SHOWN_KEY] + "..." if len(shown) > _SHOWN_KEY else shown


def child_path(path: str, key: str) -> str:
    """The path of an object member: ``.name`` when plain, else ``['...']``."""
    if key.isascii() and key.isidentifier() and len(key) <= _SHOWN_KEY:
        return f"{path}.{key}"
    return f"{path}[{show_key(key)}]"


def shown_path(path: str) -> str:
    """A path for an error: "command" and at most the last _SHOWN_PATH characters."""
    return "command" + (path if len(path) <= _SHOWN_PATH else "..." + path[-_SHOWN_PATH:])


def check_utf8(label: str, value: str) -> None:
    """Refuse a lone surrogate: it has no UTF-8 encoding, so it can be neither hashed nor stored."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        point = ord(value[exc.start])
        raise InvalidSubmissionError(
            f"{label} contains a lone surrogate (U+{point:04X}), which is not valid UTF-8"
        ) from None


class _Budget:
    """A lower bound on the canonical size, so a huge command is refused before encoding."""

    __slots__ = ("remaining",)

    def __init__(self) -> None:
        self.remaining = MAX_COMMAND_BYTES

    def spend(self, size: int) -> None:
        self.remaining -= size
        if self.remaining < 0:
            raise InvalidSubmissionError(
                f"command is more than {MAX_COMMAND_BYTES} bytes canonicalised; "
                f"the limit is {MAX_COMMAND_BYTES}"
            )


def _show_integer(value: int) -> str:
    # str() of a huge int is slow and, past 4300 digits, itself a ValueError.
    return str(value) if value.bit_length() <= 128 else f"of {value.bit_length()} bits"


def _check_json(value: Any, path: str, depth: int, budget: _Budget) -> None:
    if depth > MAX_DEPTH:
        raise InvalidSubmissionError(f"command is nested deeper than {MAX_DEPTH} levels")
    budget.spend(1)  # every value takes at least one byte of the canonical form
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        check_utf8(shown_path(path), value)
        budget.spend(len(value))
        return
    if isinstance(value, int):
        if abs(value) > EXACT_INTEGER:
            raise InvalidSubmissionError(
                f"{shown_path(path)}: integer {_show_integer(value)} is outside ±(2^53 - 1), "
                "the range RFC 8785 canonical JSON holds exactly; send it as a string"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidSubmissionError(f"{shown_path(path)}: number must be finite")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]", depth + 1, budget)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSubmissionError(f"{shown_path(path)}: object keys must be strings")
            check_utf8(f"{shown_path(path)}: key {show_key(key)}", key)
            budget.spend(len(key))
            _check_json(item, child_path(path, key), depth + 1, budget)
        return
    raise InvalidSubmissionError(f"{shown_path(path)}: {type(value).__name__} is not JSON")


def canonical_command(command: object) -> bytes:
    """Validate a command and return its RFC 8785 canonical bytes.

    Raises InvalidSubmissionError when the command is not a JSON object of
    finite numbers, exact integers, UTF-8 strings, booleans, nulls, lists and
    objects, nested at most MAX_DEPTH deep and at most MAX_COMMAND_BYTES long.
    """
    if not isinstance(command, dict):
        raise InvalidSubmissionError("command must be a JSON object")
    _check_json(command, "", 0, _Budget())
    try:
        encoded = canonical_json(command)
    except ValueError as exc:  # CanonicalizationError and UnicodeError are both ValueErrors
        # Whatever the checks above missed still ends as refused input, never a crash.
        raise InvalidSubmissionError(f"command cannot be canonicalised: {exc}") from None
    if len(encoded) > MAX_COMMAND_BYTES:
        raise InvalidSubmissionError(
            f"command is {len(encoded)} bytes canonicalised; the limit is {MAX_COMMAND_BYTES}"
        )
    return encoded


def request_fingerprint(  # noqa: PLR0913 - every part that defines the request, named
    *,
    method: str,
    route: str,
    tenant: str,
    provider: str,
    command: dict[str, Any],
    concurrency_key: str | None = None,
) -> str:
    """sha256 hex of the canonical JSON of everything that defines the request.

    A concurrency key is part of it (the same command under another key waits for other
    operations: a different request); without one, the material is what it always was,
    so fingerprints recorded before keys existed still match their replays.
    Raises InvalidSubmissionError if the command or any part cannot be canonicalised.
    """
    canonical_command(command)
    for name, part in (
        ("method", method),
        ("route", route),
        ("tenant", tenant),
        ("provider", provider),
    ):
        check_utf8(name, part)
    material = {
        "method": method.upper(),
        "route": route,
        "tenant": tenant,
        "provider": provider,
        "command": command,
    }
    if concurrency_key is not None:
        check_utf8("concurrency_key", concurrency_key)
        material["concurrency_key"] = concurrency_key
    encoded = canonical_json(material)
    return hashlib.sha256(encoded).hexdigest()
