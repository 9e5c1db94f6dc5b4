"""Request fingerprints: sha256 over RFC 8785 canonical JSON.

The fingerprint binds an idempotency key (and an approval) to exactly one
request: same key with a different fingerprint is a conflict, never a replay.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import rfc8785

from jobwarden.models.errors import InvalidSubmissionError

MAX_COMMAND_BYTES = 256 * 1024
MAX_DEPTH = 32


def _check_json(value: Any, path: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidSubmissionError(f"command{path}: nested deeper than {MAX_DEPTH} levels")
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int):
        # RFC 8785 (I-JSON) numbers must be exact doubles; larger integers would be rounded.
        if abs(value) >= 2**53:
            raise InvalidSubmissionError(
                f"command{path}: integer {value} is outside ±(2^53 - 1), JSON's exact range"
            )
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidSubmissionError(f"command{path}: number must be finite")
        return
    if isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSubmissionError(f"command{path}: object keys must be strings")
            _check_json(item, f"{path}.{key}", depth + 1)
        return
    raise InvalidSubmissionError(f"command{path}: {type(value).__name__} is not JSON")


def canonical_command(command: object) -> bytes:
    """Validate a command and return its RFC 8785 canonical bytes.

    Raises InvalidSubmissionError when the command is not a JSON object of
    finite numbers, strings, booleans, nulls, lists and objects, or is too large.
    """
    if not isinstance(command, dict):
        raise InvalidSubmissionError("command must be a JSON object")
    _check_json(command, "", 0)
    try:
        encoded = rfc8785.dumps(command)
    except rfc8785.CanonicalizationError as exc:
        # Whatever the checks above missed still ends as refused input, never a crash.
        raise InvalidSubmissionError(f"command cannot be canonicalised: {exc}") from None
    if len(encoded) > MAX_COMMAND_BYTES:
        raise InvalidSubmissionError(
            f"command is {len(encoded)} bytes canonicalised; the limit is {MAX_COMMAND_BYTES}"
        )
    return encoded


def request_fingerprint(
    *, method: str, route: str, tenant: str, provider: str, command: dict[str, Any]
) -> str:
    """sha256 hex of the canonical JSON of everything that defines the request."""
    canonical_command(command)
    material = {
        "method": method.upper(),
        "route": route,
        "tenant": tenant,
        "provider": provider,
        "command": command,
    }
    encoded = rfc8785.dumps(material)  # type: ignore[arg-type]  # JSON values by construction
    return hashlib.sha256(encoded).hexdigest()
