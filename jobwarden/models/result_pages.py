"""A paged final result, collected page by page into one artifact.

[ARM-PAGING] ARM RPC "Resource API reference" (list responses) and the Azure REST API
Guidelines "Collections": a list answers ``{"value": [...], "nextLink": "<URL>"}``; the
list continues at ``nextLink`` (a URL, resolved against the page that named it,
RFC 3986 section 5) until a page has none. Microsoft's ARM scenario
``LroPaging_postPagingLro`` ends a long-running POST with such a first page.

One page is fetched per collect step, each a counted result fetch from an allowed
origin; the items gathered so far ride in the row (``expected.paging``) between steps,
bounded by ``MAX_PAGES`` and by ``held_limit`` bytes, and the artifact written at the end
is ``{"value": [every item]}`` with its item count. Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from jobwarden.models.contract import ProviderContract, ResultSpec
from jobwarden.models.convention_urls import resolve_reference
from jobwarden.models.conventions import AZURE

__all__ = [
    "MAX_PAGES",
    "first_page",
    "held_limit",
    "next_page",
    "paged_artifact",
]

MAX_PAGES: Final = 100
# The items gathered so far are held in the row between steps: never more than this.
MAX_HELD: Final = 4 * 1024 * 1024
ITEMS: Final = "value"
NEXT: Final = "nextLink"


def held_limit(spec: ResultSpec) -> int:
    return min(spec.max_bytes, MAX_HELD)


def _page_parts(body: object) -> tuple[list[Any], str | None] | None:
    """``(items, nextLink)`` of an ARM list page; None when ``body`` is not one."""
    if not isinstance(body, Mapping) or not isinstance(body.get(ITEMS), list):
        return None
    link = body.get(NEXT)
    return list(body[ITEMS]), link if isinstance(link, str) and link.strip() else None


def _size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def first_page(contract: ProviderContract, body: object, base: str) -> dict[str, Any] | None:
    """The paging state a final body starts, when it is the first page of a list that
    continues (a ``nextLink``) under an Azure convention; None otherwise."""
    if contract.convention not in AZURE:
        return None
    parts = _page_parts(body)
    if parts is None:
        return None
    items, link = parts
    if link is None:
        return None
    return {
        "items": items,
        "pages": 1,
        "bytes": _size(body),
        "next": resolve_reference(link, base),
    }


def next_page(
    paging: Mapping[str, Any], body: object, size: int, page_url: str, spec: ResultSpec
) -> tuple[dict[str, Any] | None, str | None]:
    """``(paging, problem)`` after one more page: the items added, the next link (None at
    the end), or why the paged result cannot be collected (not a list page, over a bound)."""
    parts = _page_parts(body)
    if parts is None:
        return None, f"page {int(paging['pages']) + 1} of the paged result is not a list page"
    items, link = parts
    pages, total = int(paging["pages"]) + 1, int(paging["bytes"]) + size
    if total > held_limit(spec):
        return None, f"paged result exceeds {held_limit(spec)} bytes after {pages} pages"
    if link is not None and pages >= MAX_PAGES:
        return None, f"paged result has more than {MAX_PAGES} pages"
    return {
        "items": [*paging["items"], *items],
        "pages": pages,
        "bytes": total,
        "next": resolve_reference(link, page_url) if link is not None else None,
    }, None


def paged_artifact(paging: Mapping[str, Any]) -> tuple[bytes, int]:
    """The one artifact of a paged result: ``{"value": [...]}`` and its item count."""
    items = list(paging["items"])
    return json.dumps({ITEMS: items}, separators=(",", ":")).encode(), len(items)
