"""RFC 6901 JSON pointers over parsed JSON documents.

Provider responses are untrusted: resolving a pointer never raises, whatever
the document holds. An absent value is the ``MISSING`` sentinel, distinct from
a JSON ``null`` (``None``), because "field absent" and "field is null" mean
different things to a state table (AIP-151 ``error`` is absent while running).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Final, Literal


class Missing(Enum):
    """Type of the one ``MISSING`` sentinel (an enum so mypy can narrow on it)."""

    MISSING = "MISSING"  # the pointer names nothing in the document

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> Literal[False]:
        return False


MISSING: Final = Missing.MISSING


def _unescape(token: str) -> str:
    # Order matters (RFC 6901 section 4): "~01" must become "~1", not "/".
    return token.replace("~1", "/").replace("~0", "~")


def _array_index(token: str, length: int) -> int | None:
    # RFC 6901: array indices are "0" or digits without a leading zero; "-" names
    # the element after the last, which never exists when reading.
    if not token or not token.isascii() or not token.isdigit():
        return None
    if len(token) > 1 and token[0] == "0":
        return None
    index = int(token)
    return index if index < length else None


def resolve_pointer(doc: object, pointer: str) -> object | Missing:
    """Return the value ``pointer`` names in ``doc``, or ``MISSING``.

    ``""`` names the whole document. A pointer that does not start with "/",
    a key that is absent, an index out of range or a step through a scalar all
    give ``MISSING``; nothing here raises.
    """
    if pointer == "":
        return doc
    if not pointer.startswith("/"):
        return MISSING
    current: object = doc
    for raw_token in pointer[1:].split("/"):
        token = _unescape(raw_token)
        if isinstance(current, Mapping):
            if token not in current:
                return MISSING
            current = current[token]
        elif isinstance(current, Sequence) and not isinstance(current, str | bytes | bytearray):
            index = _array_index(token, len(current))
            if index is None:
                return MISSING
            current = current[index]
        else:
            return MISSING
    return current
