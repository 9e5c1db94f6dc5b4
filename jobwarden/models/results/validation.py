"""Result validation: what a collected result must show before `succeeded`.

Pure: the shell fetches the bytes; this decides whether they are the result the business
expects — size, integrity (``models.results.digests``), content type, parse, per-item outcomes and
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

from jobwarden.models.contracts.contract import ProviderContract, ResultSpec
from jobwarden.models.provider.origins import on_allowed_origin
from jobwarden.models.provider.pointers import MISSING, resolve_pointer
from jobwarden.models.results.digests import DigestCheck, Digester
from jobwarden.models.results.item_outcomes import (
    MAX_FAILED_REFS,
    ItemRefusedError,
    Tally,
    cross_check,
    has_item_rules,
    number,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultVerdict:
    valid: bool
    problem: str | None
    sha256: str
    size_bytes: int
    record_count: int | None = None
    succeeded_items: int | None = None
    failed_items: list[Any] = field(default_factory=list)  # the first MAX_FAILED_KEPT
    failed_more: int = 0  # failed items counted past those kept (all are in the object)
    failed_refs: tuple[Any, ...] = ()  # the first MAX_FAILED_REFS failed items' references
    # Failed items the status body counts in a file that was not fetched (OpenAI error file).
    failed_elsewhere: int = 0
    failed_file: str | None = None
    failed_file_location: str | None = None  # where the failed-items file was stored
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
        return len(self.failed_items) + self.failed_more + self.failed_elsewhere

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
        omitted = len(self.failed_items) + self.failed_more - len(self.failed_refs)
        if omitted > 0:
            out["failed_item_refs_omitted"] = omitted
        if self.failed_file is not None:
            out["failed_items_file"] = self.failed_file
        if self.failed_file_location is not None:
            out["failed_items_location"] = self.failed_file_location
        if self.declared_counts:
            out["declared_counts"] = dict(self.declared_counts)
        if self.digests:
            out["digests"] = [check.summary() for check in self.digests]
        if self.integrity_notes:
            out["integrity_notes"] = list(self.integrity_notes)
        return out


def failed_lines_spec(spec: ResultSpec) -> ResultSpec:
    """How a failed-items file (OpenAI ``error_file_id``) is read: JSON Lines, every line
    one failed item with its reference (``item_ref_pointer``); none of the result's own
    type, digest or count rules apply to it."""
    return replace(
        spec,
        jsonl=True,
        content_type=None,
        items_pointer=None,
        failed_items_pointer=None,
        record_count_pointer=None,
        item_status_pointer=None,
        item_failed_values=(),
        item_succeeded_values=(),
        item_error_pointer="",  # the whole line: present, so failed
        item_status_code_pointer=None,
        checksum_pointer=None,
        digests=(),
        digests_required=False,
        completed_count_pointer=None,
        failed_count_pointer=None,
        total_count_pointer=None,
        error_file_pointer=None,
        error_file_path=None,
        max_failed_fraction=1.0,
    )


# A result this small stays in the database beside its facts (DESIGN: "a result is an
# artifact, not a column" — but a 2 KiB JSON answer needs no object of its own).
INLINE_LIMIT: Final = 64 * 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class Collected:
    """A result download as the shell streamed it: judged on the way (``verdict``, whose
    sha256 and size are the stored bytes'), written to the result store (``location``;
    None when nothing was kept), and the bytes themselves when at most INLINE_LIMIT.
    ``page``: the whole body, when the contract's result may be paged (models/result_pages)
    and it is within the paging bound, for the core to read its next link."""

    verdict: ResultVerdict
    location: str | None
    inline: bytes | None
    page: bytes | None = None


def origin_allowed(contract: ProviderContract, base_url: str, url: str) -> bool:
    """Results are fetched only from origins the contract allows (default: the provider's)."""
    spec = contract.result
    return on_allowed_origin(url, base_url, spec.allowed_origins if spec else ())


def promised_checksum_key(spec: ResultSpec) -> str:
    """Where the status body's digest is carried in ``expected`` ("expected_sha256", ...)."""
    return f"expected_{spec.checksum_algorithm.value}"


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
    The bytes in hand are one chunk of ``ResultScan``, which judges a streamed result.
    """
    scan = ResultScan(
        spec,
        content_type=content_type,
        expected_sha256=expected_sha256,
        declared_record_count=declared_record_count,
        promised=promised,
        headers=headers,
    )
    scan.feed(content)
    return scan.finish(body_problem)


# A JSON document is parsed whole, so it is held whole: up to this many bytes (JSON Lines
# are judged line by line and held one line at a time, each at most this long).
DOCUMENT_LIMIT: Final = 64 * 1024 * 1024


class ResultScan:
    """One result judged as its bytes arrive, in the order ``validate_result`` states.

    ``feed`` each chunk (decoded, as stored), then ``finish`` once. Memory stays near one
    chunk plus one JSON Lines line whatever the result's size; a JSON document is held
    up to ``DOCUMENT_LIMIT``. Hashes and counts cover every byte fed, so the verdict's
    sha256 and size are those of the bytes the shell stored alongside.
    """

    def __init__(
        self,
        spec: ResultSpec,
        *,
        content_type: str | None,
        expected_sha256: str | None = None,
        declared_record_count: int | None = None,
        promised: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._spec = spec
        self._content_type = content_type
        self._declared_count = declared_record_count
        self._promised = dict(promised or {})
        if expected_sha256 is not None:
            self._promised.setdefault("expected_sha256", expected_sha256)
        self._digester = Digester(spec, headers or {})
        self._sha256 = hashlib.sha256()
        self.size = 0
        # The JSON document so far, or the JSON Lines line in progress.
        self._held = bytearray()
        self._line = 0  # JSON Lines: lines read, for the messages
        self._tally = Tally()
        self._problem: str | None = None  # the first parse or item problem

    def feed(self, chunk: bytes) -> None:
        self.size += len(chunk)
        self._sha256.update(chunk)
        self._digester.update(chunk)
        if self.size > self._spec.max_bytes or self._problem is not None:
            return  # refused already: only the digest and the size still count
        self._held += chunk
        if self._spec.jsonl:
            self._lines()
        elif len(self._held) > DOCUMENT_LIMIT:
            self._refuse(f"a JSON document over {DOCUMENT_LIMIT} bytes is not read whole")

    def _refuse(self, problem: str) -> None:
        self._problem = problem
        self._held = bytearray()

    def _lines(self) -> None:
        start = 0
        while (end := self._held.find(b"\n", start)) >= 0 and self._problem is None:
            self._line_item(bytes(self._held[start:end]))
            start = end + 1
        del self._held[:start]
        if self._problem is None and len(self._held) > DOCUMENT_LIMIT:
            self._refuse(f"result line {self._line + 1} is longer than {DOCUMENT_LIMIT} bytes")

    def _line_item(self, raw: bytes) -> None:
        self._line += 1
        try:
            text = raw.decode()
        except UnicodeDecodeError:
            self._refuse("result is not valid JSON (not UTF-8)")
            return
        if not text.strip():
            return
        # A hostile line nested thousands deep exhausts the parser's recursion: that is an
        # invalid result (result_validation_failed), not a crashed collect step.
        try:
            item = json.loads(text)
        except RecursionError:
            self._refuse(f"result line {self._line} is nested too deeply to be read")
            return
        except ValueError:
            self._refuse(f"result line {self._line} is not valid JSON")
            return
        try:
            self._tally.add(self._spec, item, f"line {self._tally.ok + self._tally.failed + 1}")
        except ItemRefusedError as unreadable:
            self._refuse(str(unreadable))

    def finish(self, body_problem: str | None = None) -> ResultVerdict:
        """The verdict over every byte fed; never raises on provider input."""
        spec = self._spec
        refused = ResultVerdict(
            valid=False, problem=None, sha256=self._sha256.hexdigest(), size_bytes=self.size
        )
        # An oversize body is cut at the limit: it must say so, never look like a bad checksum.
        if body_problem == "too_large" or self.size > spec.max_bytes:
            return replace(
                refused, problem=f"result exceeds {spec.max_bytes} bytes", keepable=False
            )
        if body_problem is not None:
            problem = f"result body unreadable ({body_problem})"
            return replace(refused, problem=problem, keepable=False)
        report = self._digester.report(self._promised.get(promised_checksum_key(spec), MISSING))
        refused = replace(refused, digests=report.checks, integrity_notes=report.notes)
        if report.problem is not None:
            return replace(refused, problem=report.problem, keepable=False)
        ctype = self._content_type
        if spec.content_type:
            if ctype is None:
                return replace(refused, problem=f"no content type; expected {spec.content_type!r}")
            if ctype.split(";")[0].strip().lower() != spec.content_type.lower():
                problem = f"content type {ctype!r}, expected {spec.content_type!r}"
                return replace(refused, problem=problem)
        if spec.jsonl and self._problem is None and self._held:
            self._line_item(bytes(self._held))  # the last line needs no newline
        if self._problem is not None:
            return replace(refused, problem=self._problem)
        if spec.jsonl:
            return self._judged(refused, listed=True, doc=None)
        return self._document(refused)

    def _document(self, refused: ResultVerdict) -> ResultVerdict:
        spec, tally = self._spec, self._tally
        try:
            doc = json.loads(bytes(self._held).decode())
        except UnicodeDecodeError:
            return replace(refused, problem="result is not valid JSON (not UTF-8)")
        except RecursionError:
            return replace(refused, problem="result is nested too deeply to be read")
        except ValueError:
            return replace(refused, problem="result is not valid JSON")
        items = resolve_pointer(doc, spec.items_pointer) if spec.items_pointer is not None else doc
        if spec.items_pointer is not None and not isinstance(items, list):
            return replace(refused, problem=f"result has no item list at {spec.items_pointer}")
        if has_item_rules(spec) and not isinstance(items, list):
            return replace(refused, problem="result is not a list of items")
        try:
            for index, item in enumerate(items if isinstance(items, list) else []):
                tally.add(spec, item, f"item {index + 1}")
        except ItemRefusedError as unreadable:
            return replace(refused, problem=str(unreadable))
        if spec.failed_items_pointer is not None:
            separate = resolve_pointer(doc, spec.failed_items_pointer)
            for index, item in enumerate(separate if isinstance(separate, list) else []):
                tally.fail(spec, item, f"failed item {index + 1}")
        return self._judged(refused, listed=isinstance(items, list), doc=doc)

    def _judged(self, refused: ResultVerdict, *, listed: bool, doc: object) -> ResultVerdict:
        """The counts: the record count, the status body's counts, the failed fraction."""
        spec, tally, promised = self._spec, self._tally, self._promised
        ok_count = tally.ok if listed else None
        count = self._declared_count
        if spec.record_count_pointer is not None and doc is not None:
            in_body = number(resolve_pointer(doc, spec.record_count_pointer))
            count = count if in_body is None else in_body
        declared: dict[str, int] = dict(promised.get("declared_counts") or {})
        failed_file = promised.get("error_file")
        fetched = promised.get("failed_file")
        counted = fetched if isinstance(fetched, Mapping) else {}
        elsewhere, refs = 0, list(tally.refs)
        if isinstance(counted.get("lines"), int):
            # The failed-items file was downloaded and counted: its lines are the failures
            # elsewhere, and their references are recorded beside the result's own.
            elsewhere = counted["lines"]
            more = [r for r in counted.get("refs") or () if isinstance(r, str | int)]
            refs = (refs + more)[:MAX_FAILED_REFS]
        elif isinstance(failed_file, str) and "failed" in declared:
            # OpenAI Batch: failed requests are in error_file_id; the status body counts them.
            elsewhere = max(0, declared["failed"] - tally.failed)
        location = counted.get("location")
        verdict = replace(
            refused,
            record_count=count,
            succeeded_items=ok_count,
            failed_items=list(tally.failed_kept),
            failed_more=tally.failed_more,
            failed_refs=tuple(refs),
            failed_elsewhere=elsewhere,
            failed_file=failed_file if isinstance(failed_file, str) else None,
            failed_file_location=location if isinstance(location, str) else None,
            declared_counts=declared,
        )
        if count is not None and ok_count is not None and ok_count + tally.failed != count:
            problem = f"record count {count} but {ok_count} items and {tally.failed} failed"
            return replace(verdict, problem=problem)
        disagreement = cross_check(declared, ok_count, verdict.failed_count)
        if disagreement is not None:
            return replace(verdict, problem=disagreement)
        total = (ok_count or 0) + verdict.failed_count
        if total and verdict.failed_count / total > spec.max_failed_fraction:
            return replace(verdict, problem=f"{verdict.failed_count} of {total} items failed")
        return replace(verdict, valid=True)
