"""RFC 8785 (JSON Canonicalization Scheme) bytes, fast where the stdlib already agrees.

Every write hashes its events and the row they bind; the ``rfc8785`` package does it in
pure Python and cost about a tenth of a poll's CPU. For most values the C-accelerated
``json.dumps`` (sorted keys, no whitespace, UTF-8) gives the very same bytes, and it is
used exactly where it provably does; anything else goes to ``rfc8785``:

- keys must be ASCII: RFC 8785 sorts keys by UTF-16 code units, Python by code points,
  and the two orders differ only above U+FFFF against U+E000..U+FFFF;
- floats must be non-integral with 1e-4 <= |x| < 1e16: there ECMAScript's Number
  serialisation (RFC 8785 section 3.2.2.3) and Python's shortest ``repr`` write the same
  digits in the same fixed notation; ``2.0``, ``0.0``, ``1e-05`` and ``1e16`` differ;
- integers must be within +-(2^53 - 1), the range RFC 8785 holds exactly;
- strings escape alike (``"``, ``\\``, and U+0000..U+001F, short forms where JSON has
  them, else lowercase ``\\u00xx``); a lone surrogate cannot be encoded and is left to
  ``rfc8785``, which refuses it.

tests/unit/test_canonical.py holds the two encoders equal over arbitrary JSON values.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import rfc8785

_SAFE = 2**53 - 1
_ENCODE = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
).encode


def _plain(value: Any) -> bool:
    """Whether ``json.dumps`` spells ``value`` exactly as RFC 8785 does."""
    # A loop over a stack, not recursion with generators: this runs on every hashed value.
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if item is None or kind is str or kind is bool:
            continue
        if kind is int:
            if not -_SAFE <= item <= _SAFE:  # beyond: no exact double, rfc8785 refuses it
                return False
        elif kind is float:
            if item.is_integer() or not 1e-4 <= abs(item) < 1e16:
                return False
        elif isinstance(item, Mapping):
            for key in item:
                if type(key) is not str or not key.isascii():
                    return False
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
        else:  # subclasses (a StrEnum, an IntEnum) and anything else: rfc8785 decides
            return False
    return True


def plain_dumps(value: Any) -> bytes | None:
    """The RFC 8785 bytes of ``value`` where ``json.dumps`` writes them, else None."""
    if _plain(value):
        try:
            return _ENCODE(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: rfc8785 says why it cannot be canonical
    return None


def dumps(value: Any) -> bytes:
    """The RFC 8785 bytes of a JSON value; raises as ``rfc8785.dumps`` does for the rest."""
    fast = plain_dumps(value)
    return fast if fast is not None else rfc8785.dumps(value)
