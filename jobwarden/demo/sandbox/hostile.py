"""The sandbox's hostile answers: what a misbehaving provider sends.

Pure helpers behind the ``hostile_*`` and ``job_id_style`` behaviour knobs
(see :mod:`jobwarden.demo.sandbox.behaviour`): odd job ids, deep JSON, numbers past
64 bits, an echoed credential, and huge bodies generated while they are written
so that the sandbox itself never holds them. Foreign origins are only ever
named in answers; nothing here opens a connection.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

# Numbers real providers send (64-bit counters, float estimates) that overflow
# naive handling: past 2^53 a float loses them, rfc8785 refuses them outright.
BIG_NUMBERS: dict[str, Any] = {
    "bytes_processed": 2**64,
    "bytes_signed": -(2**64),
    "records_seen": 2**70,
    "cost_estimate": 1e300,
    "tiny_fraction": 1e-300,
}
_CHUNK = 64 * 1024
# A dripped body is padded with JSON whitespace to this size, so it outlasts any timeout.
DRIP_BYTES = 4096
_DEEP_MARK = "__sandbox_deep_json__"

Generator = Callable[[], Iterator[bytes]]


def job_id(base: str, style: str) -> str:
    """The id a job is known by: ``base`` as is, or made hostile in ``style``."""
    if style == "newline":
        return f"{base}\nx"
    if style == "tab":
        return f"{base}\tx"
    if style == "long":
        return base + "x" * 600
    if style == "dot_segments":
        return f"{base}/../x"
    return base


def dumps_with_deep(document: dict[str, Any], field: str, depth: int) -> bytes:
    """``document`` serialised with ``depth`` nested arrays at ``field``.

    Spliced in as text: json.dumps itself would recurse once per level.
    """
    marked = {**document, field: _DEEP_MARK}
    text = json.dumps(marked)
    return text.replace(json.dumps(_DEEP_MARK), "[" * depth + "]" * depth, 1).encode()


def echo(authorization: str | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Body fields and headers echoing the credential received, in plain and encoded forms."""
    value = authorization or ""
    fields = {
        "debug": {
            "received": value,
            "received_b64": base64.b64encode(value.encode()).decode(),
        }
    }
    headers = {"X-Echoed-Authorization": value} if value else {}
    return fields, headers


def echo_location(job: str, authorization: str | None) -> str:
    return f"/v1/jobs/{quote(job, safe='')}?seen={quote(authorization or '', safe='')}"


def padded(body: bytes, size: int = DRIP_BYTES) -> bytes:
    """``body`` followed by JSON whitespace up to ``size`` bytes (still the same JSON)."""
    return body + b" " * max(0, size - len(body))


def generated_json(fields: dict[str, Any], total: int) -> tuple[Generator, int]:
    """A JSON object of ``fields`` plus a padding string, exactly ``total`` bytes long
    (or the shortest such object, if ``total`` is smaller), generated chunk by chunk."""
    head = json.dumps(fields)[:-1].encode() + b', "padding": "'
    tail = b'"}'
    filler = max(0, total - len(head) - len(tail))

    def chunks() -> Iterator[bytes]:
        yield head
        block = b"x" * _CHUNK
        left = filler
        while left > 0:
            step = min(left, _CHUNK)
            yield block[:step]
            left -= step
        yield tail

    return chunks, len(head) + filler + len(tail)


def digest(chunks: Generator) -> str:
    """sha256 of a generated body, computed without holding it."""
    hasher = hashlib.sha256()
    for chunk in chunks():
        hasher.update(chunk)
    return hasher.hexdigest()


def generated_result(record_count: int, total: int) -> tuple[Generator, int, str]:
    """A ``total``-byte result document, generated per download, and its sha256."""
    chunks, length = generated_json({"record_count": record_count, "items": []}, total)
    return chunks, length, digest(chunks)


def result_reference(job: str, mode: str, foreign_origin: str) -> str:
    """Where a succeeded status says the result is, per ``hostile_result``."""
    path = f"/v1/jobs/{job}/result"
    if mode == "foreign_host":
        return foreign_origin + path
    if mode == "newline_reference":
        return path + "\nx"
    if mode == "tab_reference":
        return path + "\tx"
    return path
