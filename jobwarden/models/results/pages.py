"""A paged final result, collected page by page into one artifact.

[ARM-PAGING] ARM RPC "Resource API reference" (list responses) and the Azure REST API
Guidelines "Collections": a list answers ``{"value": [...], "nextLink": "<URL>"}``; the
list continues at ``nextLink`` (a URL, resolved against the page that named it,
RFC 3986 section 5) until a page has none. Microsoft's ARM scenario
``LroPaging_postPagingLro`` ends a long-running POST with such a first page.

A contract sets its own shape in ``[result]``: ``next_link_pointer`` (where a page names
the next one; it makes the result paged under any convention) and ``items_pointer``
(where a page holds its items; ``/value`` when left out). A first page is a final body
taken from a poll answer, or a final result fetched from a URL (``fetch = "url"``, the
``resourceLocation``): both continue the same way.

One page is fetched per collect step, each a counted result fetch from an allowed
origin; the items gathered so far ride in the row (``expected.paging``) between steps,
bounded by ``MAX_PAGES`` and by ``held_limit`` bytes, and the artifact written at the end
holds every item where a page holds them (``{"value": [...]}``) with its item count.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from jobwarden.models.contracts.contract import ProviderContract, ResultSpec
from jobwarden.models.conventions.strategies import AZURE
from jobwarden.models.conventions.urls import resolve_reference
from jobwarden.models.provider.pointers import resolve_pointer

__all__ = [
    "ITEMS",
    "MAX_HELD",
    "MAX_PAGES",
    "NEXT",
    "PageShape",
    "first_page",
    "held_limit",
    "next_page",
    "page_shape",
    "paged_artifact",
]

MAX_PAGES: Final = 100
# The items gathered so far are held in the row between steps: never more than this.
MAX_HELD: Final = 4 * 1024 * 1024
ITEMS: Final = "/value"  # [ARM-PAGING] the page's items
NEXT: Final = "/nextLink"  # [ARM-PAGING] the next page's URL


@dataclass(frozen=True, slots=True)
class PageShape:
    """Where a page holds its items and the next page's URL (JSON pointers, RFC 6901)."""

    items: str
    next: str


def page_shape(contract: ProviderContract) -> PageShape | None:
    """How ``contract``'s final result pages: its own ``next_link_pointer`` under any
    convention, else the ARM shape under an Azure one; None when it never pages."""
    spec = contract.result
    if spec is None or spec.jsonl:
        return None
    items = spec.items_pointer or ITEMS  # "" (the whole document) holds no next link
    if spec.next_link_pointer is not None:
        return PageShape(items=items, next=spec.next_link_pointer)
    if contract.convention in AZURE:
        return PageShape(items=items, next=NEXT)
    return None


def held_limit(spec: ResultSpec) -> int:
    return min(spec.max_bytes, MAX_HELD)


def _page_parts(shape: PageShape, body: object) -> tuple[list[Any], str | None] | None:
    """``(items, next link)`` of a list page; None when ``body`` is not one."""
    items = resolve_pointer(body, shape.items)
    if not isinstance(body, Mapping) or not isinstance(items, list):
        return None
    link = resolve_pointer(body, shape.next)
    return list(items), link if isinstance(link, str) and link.strip() else None


def _size(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def first_page(contract: ProviderContract, body: object, base: str) -> dict[str, Any] | None:
    """The paging state a final body starts, when it is the first page of a list that
    continues (a next link, resolved against ``base``, the URL that answered it); None
    when the contract never pages or the body is not such a page."""
    shape = page_shape(contract)
    parts = _page_parts(shape, body) if shape is not None else None
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
    contract: ProviderContract,
    paging: Mapping[str, Any],
    body: object,
    size: int,
    page_url: str,
) -> tuple[dict[str, Any] | None, str | None]:
    """``(paging, problem)`` after one more page: the items added, the next link (None at
    the end), or why the paged result cannot be collected (not a list page, over a bound)."""
    shape, spec = page_shape(contract), contract.result
    parts = _page_parts(shape, body) if shape is not None else None
    if parts is None or spec is None:
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


def _placed(pointer: str, items: list[Any]) -> object:
    """A document holding ``items`` at ``pointer`` (RFC 6901 tokens, ``~1``/``~0`` undone),
    so the contract's ``items_pointer`` finds them in the artifact as in each page."""
    doc: object = items
    for token in reversed(pointer.split("/")[1:]):
        doc = {token.replace("~1", "/").replace("~0", "~"): doc}
    return doc


def paged_artifact(shape: PageShape, paging: Mapping[str, Any]) -> tuple[bytes, int]:
    """The one artifact of a paged result (``{"value": [...]}``) and its item count."""
    items = list(paging["items"])
    doc = _placed(shape.items, items)
    return json.dumps(doc, separators=(",", ":")).encode(), len(items)
