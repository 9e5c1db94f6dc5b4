"""Per-item outcomes of a result: which items failed, by the contract's rules, and the
references of the failed ones.

Pure. ``Tally`` is fed one item at a time, so a result of millions of JSON Lines is
judged in constant memory: it counts every item, and keeps only the first
``MAX_FAILED_KEPT`` failed items and ``MAX_FAILED_REFS`` references (the stored result
keeps every item, so nothing is lost by not holding them here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from jobwarden.models.contracts.contract import ResultSpec
from jobwarden.models.provider.pointers import Missing, resolve_pointer

# Failed items' references recorded in the summary; the stored result keeps every item.
MAX_FAILED_REFS: Final = 100
# Failed items kept whole for the results row (the rest are counted, and in the object).
MAX_FAILED_KEPT: Final = 1000


class ItemRefusedError(Exception):
    """One item no rule can read: the result is refused with this message."""


def number(value: object | Missing) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def item_ref(spec: ResultSpec, item: object, where: str) -> Any:
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


def has_item_rules(spec: ResultSpec) -> bool:
    pointers = (spec.item_status_pointer, spec.item_error_pointer, spec.item_status_code_pointer)
    return any(p is not None for p in pointers)  # "" is a pointer too: the whole item


def item_failed(spec: ResultSpec, item: object, where: str) -> bool:
    """One item's outcome by the contract's per-item rules; refuses what no rule can read."""
    failed = False
    if spec.item_status_pointer is not None:
        status = _status_text(resolve_pointer(item, spec.item_status_pointer))
        if status is None:
            raise ItemRefusedError(f"{where} has no status at {spec.item_status_pointer}")
        failed = status in spec.item_failed_values
        if not failed and spec.item_succeeded_values and status not in spec.item_succeeded_values:
            # Unknown is a state, not a guess: a finished result holds only known outcomes.
            raise ItemRefusedError(f"{where} has status {status!r}, neither succeeded nor failed")
    if spec.item_error_pointer is not None:
        error = resolve_pointer(item, spec.item_error_pointer)
        failed = failed or not (isinstance(error, Missing) or error is None)
    if spec.item_status_code_pointer is not None:
        code = resolve_pointer(item, spec.item_status_code_pointer)
        if not (isinstance(code, Missing) or code is None):
            found = number(code)
            if found is None:
                pointer = spec.item_status_code_pointer
                raise ItemRefusedError(
                    f"{where} has a status code that is not a number at {pointer}"
                )
            failed = failed or found >= 400
    return failed


@dataclass(slots=True)
class Tally:
    """The outcomes seen so far (mutable: it lives inside one scan of one result)."""

    ok: int = 0
    failed_kept: list[Any] = field(default_factory=list)
    failed_more: int = 0  # failed items counted but not kept
    refs: list[Any] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return len(self.failed_kept) + self.failed_more

    def add(self, spec: ResultSpec, item: object, where: str) -> None:
        """One item; ItemRefusedError when the contract's rules cannot read it."""
        if has_item_rules(spec) and item_failed(spec, item, where):
            self.fail(spec, item, where)
        else:
            self.ok += 1

    def fail(self, spec: ResultSpec, item: object, where: str) -> None:
        if len(self.failed_kept) < MAX_FAILED_KEPT:
            self.failed_kept.append(item)
        else:
            self.failed_more += 1
        if len(self.refs) < MAX_FAILED_REFS:
            self.refs.append(item_ref(spec, item, where))


def cross_check(declared: dict[str, int], ok: int | None, failed: int) -> str | None:
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
