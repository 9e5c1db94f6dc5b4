"""The form the event chain hashes a value in: canonical JSON that survives JSONB.

Pure. Every event hash and every row digest is sha256 over ``canonical(value)``:
RFC 8785 bytes of ``hashable(value)``. Numbers are canonicalised so the hash
survives the JSONB round trip: RFC 8785 holds only IEEE doubles, and Postgres
reads ``1e20`` back as an integer. Every number outside the exact range
(integers beyond 2^53 - 1, floats of at least 2^53, non-finite floats) is hashed
as a tagged string of its exact decimal value, which a float and the integer
JSONB returns for it share. Times are hashed as UTC ISO 8601 with microseconds,
the precision Postgres keeps.

``legacy_canonical`` is the form events took before numbers were tagged; only
verification reads it, to check events written then.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Final

import rfc8785

from jobwarden.models.canonical import dumps as canonical_json
from jobwarden.models.canonical import plain_dumps

SAFE_INTEGER: Final = 2**53 - 1
# Postgres text and JSONB cannot hold NUL, so no stored string can collide with a tag.
NUMBER_TAG: Final = "\x00number:"


def exact_decimal(value: int | float) -> str:
    """The exact decimal value of a JSON number, spelled one way per value.

    Digits without trailing zeros, ``e``, the exponent: ``1e300`` for both the
    float 1e300 (as its shortest repr, the text JSON and Postgres hold) and the
    integer 10**300 JSONB returns for it. Non-finite floats are named.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    exact = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    sign, digit_tuple, exponent = exact.as_tuple()
    digits = list(digit_tuple)
    assert isinstance(exponent, int)  # finite by the checks above
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exponent += 1
    return ("-" if sign and any(digits) else "") + "".join(map(str, digits)) + f"e{exponent}"


def _key(key: object) -> str:
    # The same spelling json.dumps gives a non-string key when the value is stored.
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, float) and not math.isfinite(key):
        return exact_decimal(key)
    if isinstance(key, int | float):
        return repr(key)
    raise TypeError(f"not a JSON object key: {type(key).__name__}")


def hashable(value: Any) -> Any:
    """``value`` with every number RFC 8785 cannot hold exactly replaced by its tagged text.

    Total over JSON values (and tuples, and the non-string keys json.dumps
    accepts); raises TypeError for anything JSON cannot hold.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return (
            value if -SAFE_INTEGER <= value <= SAFE_INTEGER else NUMBER_TAG + exact_decimal(value)
        )
    if isinstance(value, float):
        # Every float of magnitude 2^53 or more is integral, and JSONB returns it as an int.
        if math.isfinite(value) and abs(value) <= SAFE_INTEGER:
            return value
        return NUMBER_TAG + exact_decimal(value)
    if isinstance(value, Mapping):
        return {_key(k): hashable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [hashable(v) for v in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """The bytes that are hashed: RFC 8785 over ``hashable(value)``."""
    # A plain value (str keys, safe integers, no float json.dumps spells otherwise) is
    # its own hashable form: one walk over it instead of two, on every write's hashes.
    fast = plain_dumps(value)
    return fast if fast is not None else canonical_json(hashable(value))


def _legacy(value: Any) -> Any:
    """Undo a JSONB round trip the way the chain hashed before numbers were tagged.

    Events written then held no integer beyond 2^53 - 1 (RFC 8785 refused them),
    so such an integer read back was a float JSONB spelled without a fraction.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INTEGER:
        return float(value)  # OverflowError for what no float wrote: caught as a mismatch
    if isinstance(value, Mapping):
        return {k: _legacy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_legacy(v) for v in value]
    return value


def legacy_canonical(value: Any) -> bytes:
    """The bytes an event read back was hashed as before numbers were tagged.

    Raises what ``rfc8785.dumps`` and ``_legacy`` raise for a value no such event held.
    """
    return rfc8785.dumps(_legacy(value))


def utc_iso(at: datetime) -> str:
    """A time as hashed: UTC, ISO 8601, microseconds."""
    if at.tzinfo is None:  # Postgres reads a naive timestamp as UTC in our sessions
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="microseconds")
