"""Result conventions the sandbox models on request, each named after its public spec.

Digest fields on the result download (``result_digest``), computed over the result as
the job produced it, so ``result_altered`` (one byte changed after the digests were
taken, as in transit) is caught by the client only if it checks them:

- ``repr-digest`` / ``content-digest``: RFC 9530, ``sha-256=:<base64>:, sha-512=:<base64>:``;
- ``content-md5``: RFC 1864, base64 of the MD5 digest;
- ``x-goog-hash``: Google Cloud Storage, ``crc32c=<base64>, md5=<base64>`` (CRC32C
  big-endian), as the two header lines read once joined.

Per-item result shapes (``result_shape``); the last ``result_failed_items`` items fail:

- ``azure_status``: ``{"value": [{"id", "status": "Succeeded" | "Failed", "error"}]}``, one
  list with a status per item (Azure Document Translation's documents status);
- ``google_jsonl``: JSON Lines, ``{"key", "response"}`` or ``{"key", "error"}`` per line (the
  Gemini Batch API results file);
- ``openai_jsonl``: the OpenAI Batch output file, one ``{"id", "custom_id", "response":
  {"status_code", "request_id", "body"}, "error": null}`` line per succeeded request; the
  failed ones are counted in the batch object's ``request_counts`` and are the lines of
  its ``error_file_id``, served by the Files API route ``GET /v1/files/{file_id}/content``
  (:func:`openai_error_lines`: the same per-line object, ``BatchRequestOutput``, with the
  request's 4xx answer in ``response``).

A big OpenAI Batch output file (``result_lines`` lines of ``result_line_bytes`` each) is
never built: :func:`openai_lines` generates it per download, the same bytes every time.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import google_crc32c

RESULT_SHAPES = ("sandbox", "azure_status", "google_jsonl", "openai_jsonl")
RESULT_DIGESTS = ("none", "repr-digest", "content-digest", "content-md5", "x-goog-hash")
_JSONL = "application/jsonl"


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode()


def _refs(total: int, failed: int) -> list[tuple[str, bool]]:
    ok = max(0, total - failed)
    return [(f"item-{n}", n > ok) for n in range(1, total + 1)]


def result_body(shape: str, job_id: str, total: int, failed: int) -> tuple[bytes, str] | None:
    """The result bytes and their content type for ``shape`` (None: the sandbox's own)."""
    items = _refs(total, failed)
    if shape == "azure_status":
        value = []
        for ref, bad in items:
            item: dict[str, Any] = {"id": ref, "path": f"/{job_id}/{ref}", "characterCharged": 12}
            if bad:
                item |= {
                    "status": "Failed",
                    "error": {"code": "InvalidRequest", "message": "rejected by the sandbox"},
                }
            else:
                item["status"] = "Succeeded"
            value.append(item)
        return json.dumps({"value": value, "@nextLink": None}).encode(), "application/json"
    lines: list[dict[str, Any]] = []
    if shape == "google_jsonl":
        for ref, bad in items:
            if bad:
                error = {"code": 3, "message": "rejected", "status": "INVALID_ARGUMENT"}
                lines.append({"key": ref, "error": error})
            else:
                lines.append({"key": ref, "response": {"candidates": [{"index": 0}]}})
    elif shape == "openai_jsonl":
        for n, (ref, bad) in enumerate(items, start=1):
            if not bad:  # failed requests are in the error file
                response = {"status_code": 200, "request_id": f"req_{n}", "body": {"id": ref}}
                lines.append(
                    {"id": f"batch_req_{n}", "custom_id": ref, "response": response, "error": None}
                )
    else:
        return None
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines), _JSONL


# Generated lines are written about this many bytes at a time.
_LINES_CHUNK = 64 * 1024


def _openai_line_head(n: int) -> str:
    return (
        f'{{"id": "batch_req_{n}", "custom_id": "item-{n}", "response": {{"status_code": 200, '
        f'"request_id": "req_{n}", "body": {{"id": "item-{n}", "padding": "'
    )


_OPENAI_LINE_TAIL = '"}}, "error": null}\n'


def min_line_bytes(count: int) -> int:
    """The shortest ``line_bytes`` :func:`openai_lines` can give each of ``count`` lines
    (the last line has the longest number)."""
    return len(_openai_line_head(count)) + len(_OPENAI_LINE_TAIL)


def openai_lines(count: int, line_bytes: int) -> Callable[[], Iterator[bytes]]:
    """The OpenAI Batch output file of ``count`` succeeded requests, every line exactly
    ``line_bytes`` bytes with its newline (a padding string fills each up), generated in
    chunks of about 64 KiB on each call: ``count * line_bytes`` bytes, never held.

    ``line_bytes`` must be at least ``min_line_bytes(count)`` (ValueError otherwise).
    """
    if line_bytes < min_line_bytes(count):
        raise ValueError(f"lines of {count} requests need at least {min_line_bytes(count)} bytes")
    filler = "x" * line_bytes
    per_chunk = max(1, _LINES_CHUNK // line_bytes)

    def chunks() -> Iterator[bytes]:
        for first in range(1, count + 1, per_chunk):
            lines = []
            for n in range(first, min(first + per_chunk, count + 1)):
                head = _openai_line_head(n)
                lines.append(head + filler[: line_bytes - len(head) - len(_OPENAI_LINE_TAIL)])
                lines.append(_OPENAI_LINE_TAIL)
            yield "".join(lines).encode()

    return chunks


def content_type(shape: str) -> str:
    return _JSONL if shape in ("google_jsonl", "openai_jsonl") else "application/json"


ERROR_FILE_PREFIX = "file-err-"


def error_file_id(job_id: str) -> str:
    return ERROR_FILE_PREFIX + job_id


def openai_error_lines(total: int, failed: int) -> bytes:
    """The OpenAI Batch error file: one line per failed request, the request's own 4xx
    answer in ``response`` (OpenAI's ``BatchRequestOutput``, "the per-line object of the
    batch output and error files"); ``error`` stays null, as for a request that was sent."""
    lines = []
    for n, (ref, bad) in enumerate(_refs(total, failed), start=1):
        if bad:
            error = {
                "message": "rejected by the sandbox",
                "type": "invalid_request_error",
                "param": "messages",
                "code": None,
            }
            response = {"status_code": 400, "request_id": f"req_{n}", "body": {"error": error}}
            lines.append(
                {"id": f"batch_req_{n}", "custom_id": ref, "response": response, "error": None}
            )
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def status_fields(
    shape: str, job_id: str, total: int, failed: int, declared_failed: int | None = None
) -> dict[str, Any]:
    """What a finished job's status says about its items (OpenAI Batch: request_counts).

    ``declared_failed``: the count the status claims instead of the truth (a lying
    provider), its total agreeing with the lie (completed + failed), so only the error
    file, which still holds the ``failed`` lines there are, can give it away.
    """
    if shape != "openai_jsonl":
        return {}
    completed = max(0, total - failed)
    said = min(failed, total) if declared_failed is None else declared_failed
    declared_total = total if declared_failed is None else completed + said
    counts = {"total": declared_total, "completed": completed, "failed": said}
    return {"request_counts": counts, "error_file_id": error_file_id(job_id) if failed else None}


def digest_headers(kind: str, content: bytes) -> dict[str, str]:
    """The digest field ``kind`` over ``content``, as its convention writes it."""
    if kind in ("repr-digest", "content-digest"):
        sha256 = _b64(hashlib.sha256(content).digest())
        sha512 = _b64(hashlib.sha512(content).digest())
        name = "Repr-Digest" if kind == "repr-digest" else "Content-Digest"
        return {name: f"sha-256=:{sha256}:, sha-512=:{sha512}:"}
    md5 = _b64(hashlib.md5(content, usedforsecurity=False).digest())
    if kind == "content-md5":
        return {"Content-MD5": md5}
    if kind == "x-goog-hash":
        crc = google_crc32c.Checksum(content).digest()  # type: ignore[no-untyped-call]
        return {"x-goog-hash": f"crc32c={_b64(crc)}, md5={md5}"}
    return {}


def altered(content: bytes) -> bytes:
    """``content`` with one digit changed: still the same shape, no longer the same bytes."""
    at = next((i for i, byte in enumerate(content) if 0x30 <= byte <= 0x39), None)
    if at is None:
        return content + b" "
    digit = b"7" if content[at : at + 1] != b"7" else b"3"
    return content[:at] + digit + content[at + 1 :]
