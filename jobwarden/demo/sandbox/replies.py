"""What the sandbox answers: a :class:`Reply` (send, drop the connection, or hold
first), JSON and error replies, and the date formats its headers use."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

from jobwarden.demo.sandbox import hostile
from jobwarden.demo.sandbox.behaviour import Behaviour

__all__ = [
    "JSON_TYPE",
    "Reply",
    "error_reply",
    "http_date_in",
    "iso_utc",
    "json_reply",
    "retry_after_value",
    "transport_mode",
]

JSON_TYPE = "application/json"


def iso_utc(moment: datetime) -> str:
    """RFC 3339 / ISO-8601 UTC with microseconds and a ``Z`` suffix."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def http_date_in(seconds: int) -> str:
    """IMF-fixdate ``seconds`` from now, rounded UP to a whole second."""
    moment = datetime.fromtimestamp(math.ceil(time.time() + seconds), UTC)
    return format_datetime(moment, usegmt=True)


def retry_after_value(seconds: int | None, date_seconds: int | None) -> str | None:
    """The Retry-After header value: delay-seconds wins over the HTTP-date form."""
    if seconds is not None:
        return str(seconds)
    if date_seconds is not None:
        return http_date_in(date_seconds)
    return None


@dataclass
class Reply:
    """What the HTTP layer must do for one request."""

    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # close the socket without sending a byte
    hold_seconds: float = 0.0  # sleep (lock released) before acting
    reprocess_status: bool = False  # after the hold, ask status(..., after_hold=True)
    stream: hostile.Generator | None = None  # a body generated while written (not held)
    length: int = 0  # the Content-Length of a streamed body
    drip_seconds: float = 0.0  # write one byte per interval
    drip_headers: bool = False  # drip the status line and headers too, not just the body
    cut_after: int | None = None  # close the connection after this many body bytes


def transport_mode(reply: Reply, mode: str, b: Behaviour, fields: dict[str, Any]) -> Reply:
    """Apply a huge or dripping hostile mode to an answer; other modes leave it as is."""
    if mode == "huge":
        reply.stream, reply.length = hostile.generated_json(fields, b.huge_bytes)
        reply.body = b""
    elif mode in ("drip", "drip_headers"):
        reply.body = hostile.padded(reply.body)
        reply.drip_seconds = b.drip_interval_seconds
        reply.drip_headers = mode == "drip_headers"
    return reply


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    merged = {"Content-Type": JSON_TYPE, **(headers or {})}
    return Reply(status=status, body=json.dumps(payload).encode(), headers=merged)


def error_reply(status: int, code: str, message: str, **headers: str) -> Reply:
    return json_reply(status, {"error": code, "message": message}, headers)
