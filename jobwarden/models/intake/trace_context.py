"""W3C Trace Context (Level 1, section 3.2): reading a caller's ``traceparent``.

``traceparent = version "-" trace-id "-" parent-id "-" trace-flags``, lowercase hex.
A header that does not parse is ignored (section 4.3: the receiver starts a new
trace), never an error.
"""

from __future__ import annotations

import re

_HEX = "[0-9a-f]"
# Version 00 is exactly 55 characters; a higher version may append fields after a "-"
# (section 3.2.4), so only its first four fields are read.
_TRACEPARENT = re.compile(rf"({_HEX}{{2}})-({_HEX}{{32}})-({_HEX}{{16}})-({_HEX}{{2}})(-.*)?")
INVALID_VERSION = "ff"
ZERO_TRACE_ID = "0" * 32
ZERO_PARENT_ID = "0" * 16


def trace_id_from(header: str | None) -> str | None:
    """The trace id of a valid ``traceparent`` value, else None."""
    if header is None:
        return None
    match = _TRACEPARENT.fullmatch(header.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, _flags, rest = match.groups()
    if version == INVALID_VERSION or (version == "00" and rest is not None):
        return None
    if trace_id == ZERO_TRACE_ID or parent_id == ZERO_PARENT_ID:
        return None
    return trace_id


def is_trace_id(value: str) -> bool:
    return re.fullmatch(f"{_HEX}{{32}}", value) is not None and value != ZERO_TRACE_ID


def traceparent(trace_id: str, parent_id: str, *, sampled: bool = True) -> str:
    """A version-00 ``traceparent`` for our trace id and one of our span ids."""
    return f"00-{trace_id}-{parent_id}-{'01' if sampled else '00'}"
