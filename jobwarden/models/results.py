"""Result validation: what a collected result must show before `succeeded`.

Pure: the shell fetches the bytes; this decides whether they are the result the business
expects — size, integrity (``models.digests``), content type, parse, per-item outcomes and
the counts the status body declared — and summarises per-item outcomes ("498 succeeded,
2 failed" with the failed items' references).

Item shapes, each from a public convention:

- one list with a per-item status field (Azure-style ``{"status": "Failed", "error": ...}``):
  ``item_status_pointer`` + ``item_failed_values``;
- JSON Lines whose failed lines carry an error (Google-style ``{"key": ..., "error": ...}``;
  OpenAI Batch output lines with a non-null ``error`` or ``response.status_code`` >= 400):
  ``jsonl`` + ``item_error_pointer`` / ``item_status_code_pointer``;
- counts in the status body (OpenAI ``request_counts``), and a second file of failed lines
  (OpenAI ``error_file_id``) whose lines are counted from the status body, not fetched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from jobwarden.models.contract import ProviderContract, ResultSpec
from jobwarden.models.digests import DigestCheck, Digester
from jobwarden.models.origins import on_allowed_origin
from jobwarden.models.pointers import MISSING, Missing, resolve_pointer

# Failed items' references recorded in the summary; the stored result keeps every item.
MAX_FAILED_REFS: Final = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultVerdict:
    valid: bool
    problem: str | None
    sha256: str
    size_bytes: int
    record_count: int | None = None
    succeeded_items: int | None = None
    failed_items: list[Any] = field(default_factory=list)
    failed_refs: tuple[Any, ...] = ()  # the first MAX_FAILED_REFS failed items' references
    # Failed items the status body counts in a file that was not fetched (OpenAI error file).
    failed_elsewhere: int = 0
    failed_file: str | None = None
    declared_counts: Mapping[str, int] = field(default_factory=dict)
    digests: tuple[DigestCheck, ...] = ()
    integrity_notes: tuple[str, ...] = ()
    # False when the bytes are not what the provider sent (cut at the size bound, unreadable,
    # or contradicting a digest it gave): such bytes are never kept, so nobody can later
    # accept a truncated or altered result as the result. Invalid for any other reason
    # (type, parse, counts, failed items), they are kept for a person to look at.
    keepable: bool = True

    @property
    def failed_count(self) -> int:
        return len(self.failed_items) + self.failed_elsewhere

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "valid": self.valid,
            "problem": self.problem,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "record_count": self.record_count,
            "succeeded_items": self.succeeded_items,
            "failed_item_count": self.failed_count,
            "failed_item_refs": list(self.failed_refs),
        }
        omitted = len(self.failed_items) - len(self.failed_refs)
        if omitted > 0:
            out["failed_item_refs_omitted"] = omitted
        if self.failed_file is not None:
            out["failed_items_file"] = self.failed_file
        if self.declared_counts:
            out["declared_counts"] = dict(self.declared_counts)
        if self.digests:
            out["digests"] = [check.summary() for check in self.digests]
        if self.integrity_notes:
            out["integrity_notes"] = list(self.integrity_notes)
        return out


def origin_allowed(contract: ProviderContract, base_url: str, url: str) -> bool:
    """Results are fetched only from origins the contract allows (default: the provider's)."""
    spec = contract.result
    return on_allowed_origin(url, base_url, spec.allowed_origins if spec else ())


def promised_checksum_key(spec: ResultSpec) -> str:
    """Where the status body's digest is carried in ``expected`` ("expected_sha256", ...)."""
    return f"expected_{spec.checksum_algorithm.value}"


class _RefusedError(Exception):
    """One item no rule can read; raised inside this module only, caught by _outcomes."""


def validate_result(
    spec: ResultSpec,
    *,
    content: bytes,
    content_type: str | None,
    expected_sha256: str | None = None,
    declared_record_count: int | None = None,
    promised: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
    body_problem: str | None = None,
) -> ResultVerdict:
    """Check size, integrity, content type, parse, items and counts, in that order.

    ``promised`` is what the status body said when the job finished (``expected_result``):
    its digest, counts and error file. ``expected_sha256`` is the older spelling of the
    status body's digest; ``headers`` (lower-cased) carry the result response's digests;
    ``body_problem`` is the edge's word for a body it could not read whole ("too_large").
    Never raises on provider input: every fault is a verdict with ``valid = False``.
    """
    promised = dict(promised or {})
    if expected_sha256 is not None:
        promised.setdefault("expected_sha256", expected_sha256)
    refused = ResultVerdict(
        valid=False,
        problem=None,
        sha256=hashlib.sha256(content).hexdigest(),
        size_bytes=len(content),
    )
    # An oversize body is cut at the limit: it must say so, never look like a bad checksum.
    if body_problem == "too_large" or len(content) > spec.max_bytes:
        return replace(refused, problem=f"result exceeds {spec.max_bytes} bytes", keepable=False)
    if body_problem is not None:
        return replace(refused, problem=f"result body unreadable ({body_problem})", keepable=False)
    digester = Digester(spec, headers or {})
    digester.update(content)
    report = digester.report(promised.get(promised_checksum_key(spec), MISSING))
    refused = replace(refused, digests=report.checks, integrity_notes=report.notes)
    if report.problem is not None:
        return replace(refused, problem=report.problem, keepable=False)
    if spec.content_type:
        if content_type is None:
            return replace(refused, problem=f"no content type; expected {spec.content_type!r}")
        if content_type.split(";")[0].strip().lower() != spec.content_type.lower():
            problem = f"content type {content_type!r}, expected {spec.content_type!r}"
            return replace(refused, problem=problem)
    return _outcomes(spec, content, promised, declared_record_count, refused)


def _parse(spec: ResultSpec, content: bytes) -> tuple[object, str] | str:
    """The document (for JSON Lines: the list of lines) and what one item is called,
    or the problem."""
    try:
        text = content.decode()
    except UnicodeDecodeError:
        return "result is not valid JSON (not UTF-8)"
    # A hostile result nested thousands deep exhausts the parser's recursion: that is an
    # invalid result (result_validation_failed), not a crashed collect step.
    if not spec.jsonl:
        try:
            return json.loads(text), "item"
        except RecursionError:
            return "result is nested too deeply to be read"
        except ValueError:
            return "result is not valid JSON"
    lines = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                lines.append(json.loads(line))
            except RecursionError:
                return f"result line {number} is nested too deeply to be read"
            except ValueError:
                return f"result line {number} is not valid JSON"
    return lines, "line"


def _number(value: object | Missing) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ref(spec: ResultSpec, item: object, where: str) -> Any:
    """A failed item's reference: the contract's pointer, a usual key, the value, or its place."""
    if spec.item_ref_pointer is not None:
        ref = resolve_pointer(item, spec.item_ref_pointer)
        return where if isinstance(ref, Missing) or ref is None else ref
    if isinstance(item, dict):
        for key in ("ref", "id", "custom_id", "key"):
            if item.get(key) is not None:
                return item[key]
        return where
    return item if isinstance(item, str | int | float) else where


def _status_text(value: object) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, str | int | float) else None


def _failed(spec: ResultSpec, item: object, where: str) -> bool:
    """One item's outcome by the contract's per-item rules; refuses what no rule can read."""
    failed = False
    if spec.item_status_pointer is not None:
        status = _status_text(resolve_pointer(item, spec.item_status_pointer))
        if status is None:
            raise _RefusedError(f"{where} has no status at {spec.item_status_pointer}")
        failed = status in spec.item_failed_values
        if not failed and spec.item_succeeded_values and status not in spec.item_succeeded_values:
            # Unknown is a state, not a guess: a finished result holds only known outcomes.
            raise _RefusedError(f"{where} has status {status!r}, neither succeeded nor failed")
    if spec.item_error_pointer is not None:
        error = resolve_pointer(item, spec.item_error_pointer)
        failed = failed or not (isinstance(error, Missing) or error is None)
    if spec.item_status_code_pointer is not None:
        code = resolve_pointer(item, spec.item_status_code_pointer)
        if not (isinstance(code, Missing) or code is None):
            number = _number(code)
            if number is None:
                pointer = spec.item_status_code_pointer
                raise _RefusedError(f"{where} has a status code that is not a number at {pointer}")
            failed = failed or number >= 400
    return failed


def _outcomes(
    spec: ResultSpec,
    content: bytes,
    promised: Mapping[str, Any],
    declared_record_count: int | None,
    refused: ResultVerdict,
) -> ResultVerdict:
    parsed = _parse(spec, content)
    if isinstance(parsed, str):
        return replace(refused, problem=parsed)
    doc, noun = parsed
    items = resolve_pointer(doc, spec.items_pointer) if spec.items_pointer is not None else doc
    if spec.items_pointer is not None and not isinstance(items, list):
        return replace(refused, problem=f"result has no item list at {spec.items_pointer}")
    rules = spec.item_status_pointer or spec.item_error_pointer or spec.item_status_code_pointer
    if rules and not isinstance(items, list):
        return replace(refused, problem="result is not a list of items")
    succeeded: list[Any] = []
    failed: list[Any] = []
    refs: list[Any] = []
    try:
        for index, item in enumerate(items if isinstance(items, list) else []):
            where = f"{noun} {index + 1}"
            if rules and _failed(spec, item, where):
                failed.append(item)
                if len(refs) < MAX_FAILED_REFS:
                    refs.append(_ref(spec, item, where))
            else:
                succeeded.append(item)
    except _RefusedError as unreadable:
        return replace(refused, problem=str(unreadable))
    if spec.failed_items_pointer is not None:
        separate = resolve_pointer(doc, spec.failed_items_pointer)
        for index, item in enumerate(separate if isinstance(separate, list) else []):
            failed.append(item)
            if len(refs) < MAX_FAILED_REFS:
                refs.append(_ref(spec, item, f"failed {noun} {index + 1}"))
    ok_count = len(succeeded) if isinstance(items, list) else None
    count = declared_record_count
    if spec.record_count_pointer is not None:
        in_body = _number(resolve_pointer(doc, spec.record_count_pointer))
        count = count if in_body is None else in_body
    declared: dict[str, int] = dict(promised.get("declared_counts") or {})
    failed_file = promised.get("error_file")
    elsewhere = 0
    if isinstance(failed_file, str) and "failed" in declared:
        # OpenAI Batch: failed requests are in error_file_id; the status body counts them.
        elsewhere = max(0, declared["failed"] - len(failed))
    verdict = replace(
        refused,
        record_count=count,
        succeeded_items=ok_count,
        failed_items=failed,
        failed_refs=tuple(refs),
        failed_elsewhere=elsewhere,
        failed_file=failed_file if isinstance(failed_file, str) else None,
        declared_counts=declared,
    )
    failed_count = verdict.failed_count
    if count is not None and ok_count is not None and ok_count + len(failed) != count:
        problem = f"record count {count} but {ok_count} items and {len(failed)} failed"
        return replace(verdict, problem=problem)
    disagreement = _cross_check(declared, ok_count, failed_count)
    if disagreement is not None:
        return replace(verdict, problem=disagreement)
    total = (ok_count or 0) + failed_count
    if total and failed_count / total > spec.max_failed_fraction:
        return replace(verdict, problem=f"{failed_count} of {total} items failed")
    return replace(verdict, valid=True)


def _cross_check(declared: Mapping[str, int], ok: int | None, failed: int) -> str | None:
    """The status body's counts against the items found; a disagreement names both."""
    completed, failed_declared, total = (declared.get(k) for k in ("completed", "failed", "total"))
    if (
        completed is not None
        and failed_declared is not None
        and total is not None
        and completed + failed_declared != total
    ):
        return (
            f"the status body's counts disagree: {completed} completed + "
            f"{failed_declared} failed is not {total} in total"
        )
    if ok is None:
        return None
    if completed is not None and completed != ok:
        return f"the status body says {completed} completed, the result has {ok} succeeded items"
    if failed_declared is not None and failed_declared != failed:
        return (
            f"the status body says {failed_declared} failed, the result has {failed} failed items"
        )
    if total is not None and total != ok + failed:
        return f"the status body says {total} in total, the result has {ok + failed} items"
    return None
