"""Result validation: what a collected result must show before `succeeded`.

Pure: the shell fetches the bytes; this decides whether they are the result
the business expects and summarises per-item outcomes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from jobwarden.models.contract import ProviderContract, ResultSpec
from jobwarden.models.origins import on_allowed_origin
from jobwarden.models.pointers import MISSING, resolve_pointer


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultVerdict:
    valid: bool
    problem: str | None
    sha256: str
    size_bytes: int
    record_count: int | None = None
    succeeded_items: int | None = None
    failed_items: list[Any] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "problem": self.problem,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "record_count": self.record_count,
            "succeeded_items": self.succeeded_items,
            "failed_item_count": len(self.failed_items),
            "failed_item_refs": [_ref(item) for item in self.failed_items[:100]],
        }


def _ref(item: Any) -> Any:
    if isinstance(item, dict):
        for key in ("ref", "id", "custom_id"):
            if key in item:
                return item[key]
    return item


def origin_allowed(contract: ProviderContract, base_url: str, url: str) -> bool:
    """Results are fetched only from origins the contract allows (default: the provider's)."""
    spec = contract.result
    return on_allowed_origin(url, base_url, spec.allowed_origins if spec else ())


def _parse(spec: ResultSpec, content: bytes) -> tuple[object, str | None]:
    try:
        if spec.jsonl:
            lines = [ln for ln in content.decode().splitlines() if ln.strip()]
            return [json.loads(ln) for ln in lines], None
        return json.loads(content), None
    except (ValueError, UnicodeDecodeError):
        return None, "result is not valid JSON"


def validate_result(
    spec: ResultSpec,
    *,
    content: bytes,
    content_type: str | None,
    expected_sha256: str | None,
    declared_record_count: int | None,
) -> ResultVerdict:
    """Check size, content type, checksum, record count and per-item failures."""
    digest = hashlib.sha256(content).hexdigest()
    size = len(content)
    if len(content) > spec.max_bytes:
        return ResultVerdict(
            valid=False,
            problem=f"result exceeds {spec.max_bytes} bytes",
            sha256=digest,
            size_bytes=size,
        )
    if spec.content_type and content_type is None:
        return ResultVerdict(
            valid=False,
            problem=f"no content type; expected {spec.content_type!r}",
            sha256=digest,
            size_bytes=size,
        )
    if spec.checksum_pointer is not None and expected_sha256 is None:
        # The contract promises a checksum; its absence is a failed check, not a skipped one.
        return ResultVerdict(
            valid=False, problem="the provider gave no checksum", sha256=digest, size_bytes=size
        )
    if (
        spec.content_type
        and content_type is not None
        and content_type.split(";")[0].strip().lower() != spec.content_type.lower()
    ):
        return ResultVerdict(
            valid=False,
            problem=f"content type {content_type!r}, expected {spec.content_type!r}",
            sha256=digest,
            size_bytes=size,
        )
    if expected_sha256 is not None and expected_sha256.lower() != digest:
        return ResultVerdict(
            valid=False, problem="checksum mismatch", sha256=digest, size_bytes=size
        )
    doc, problem = _parse(spec, content)
    if problem is not None:
        return ResultVerdict(valid=False, problem=problem, sha256=digest, size_bytes=size)
    items = resolve_pointer(doc, spec.items_pointer) if spec.items_pointer is not None else doc
    failed = (
        resolve_pointer(doc, spec.failed_items_pointer)
        if spec.failed_items_pointer is not None
        else MISSING
    )
    failed_list = failed if isinstance(failed, list) else []
    if spec.items_pointer is not None and not isinstance(items, list):
        return ResultVerdict(
            valid=False,
            problem=f"result has no item list at {spec.items_pointer}",
            sha256=digest,
            size_bytes=size,
        )
    ok_count = len(items) if isinstance(items, list) else None
    count: int | None = declared_record_count
    if spec.record_count_pointer is not None:
        in_body = resolve_pointer(doc, spec.record_count_pointer)
        if isinstance(in_body, int) and not isinstance(in_body, bool):
            count = in_body
    if count is not None and ok_count is not None and ok_count + len(failed_list) != count:
        return ResultVerdict(
            valid=False,
            problem=f"record count {count} but {ok_count} items and {len(failed_list)} failed",
            record_count=count,
            succeeded_items=ok_count,
            failed_items=failed_list,
            sha256=digest,
            size_bytes=size,
        )
    total = (ok_count or 0) + len(failed_list)
    if total and len(failed_list) / total > spec.max_failed_fraction:
        return ResultVerdict(
            valid=False,
            problem=f"{len(failed_list)} of {total} items failed",
            record_count=count,
            succeeded_items=ok_count,
            failed_items=failed_list,
            sha256=digest,
            size_bytes=size,
        )
    return ResultVerdict(
        valid=True,
        problem=None,
        record_count=count,
        succeeded_items=ok_count,
        failed_items=failed_list,
        sha256=digest,
        size_bytes=size,
    )
