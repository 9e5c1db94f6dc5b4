"""The URLs a convention follows, and the headers it does not.

A create or status answer may name several URLs (``Azure-AsyncOperation``,
``Operation-Location``, ``Location``); a convention follows one of them as the monitor
and perhaps another for the final result. Only the URLs it will request pass the
origin rule (invariant 10): a header it never follows is recorded as ignored, its value
bounded, and never stops the operation.

- [RFC3986-5] RFC 3986 section 5 "Reference Resolution": a relative reference is
  resolved against the URI of the request whose answer carried it (section 5.1.3,
  "Base URI from the Retrieval URI"), under every convention, before the origin rule.
- [RFC9110-10.2.2] ``Location`` may be a URI-reference, relative ones included.

Bounds: a header value and a URL are each accepted up to ``MAX_HEADER`` characters
(Microsoft's own ARM scenario ``LargeHeaders_two6k`` sends two 6 KiB monitor URLs); a
longer one is refused with a message naming the header and its size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit, urlunsplit

from jobwarden.models.provider.origins import MAX_URL, on_allowed_origin, usable_url

__all__ = [
    "MAX_HEADER",
    "Named",
    "ignored_headers",
    "received_url",
    "resolve_reference",
    "url_problem",
    "with_api_version",
]

MAX_HEADER: Final = MAX_URL  # 16 KiB: one header value, and so one URL it names
SHOWN: Final = 200  # characters of a received value a message or the history shows


@dataclass(frozen=True, slots=True, kw_only=True)
class Named:
    """A URL a header named, as received and as it will be requested."""

    header: str  # lower-cased header name ("request" for the create's own URL)
    received: str  # the value as the provider sent it
    url: str  # resolved against the request's URL ([RFC3986-5]), api-version added


def resolve_reference(received: str, request_url: str) -> str:
    """[RFC3986-5] ``received`` resolved against ``request_url``; an absolute URL as is.

    A value that cannot be parsed is returned unchanged: the origin rule then refuses it
    with the value as received.
    """
    if received.startswith(("http://", "https://")):
        return received
    try:
        urlsplit(received)
        return urljoin(request_url, received)
    except ValueError:
        return received


def received_url(value: str) -> str:
    """A URL as received, for a message or the history: no query, fragment or userinfo
    (a SAS or presigned URL carries its credential there), bounded, escaped when it
    holds control or non-ASCII characters. A relative one stays relative."""
    cut = value.split("#", 1)[0].split("?", 1)[0]
    scheme, sep, rest = cut.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        cut = f"{scheme}://{authority.rsplit('@', 1)[-1]}{slash}{path}"
    shown = cut[:SHOWN] + ("…" if len(cut) > SHOWN else "")
    return shown if shown.isprintable() else ascii(shown)


def url_problem(named: Named, base_url: str, extra: tuple[str, ...] = ()) -> str | None:
    """Why a URL the convention will follow cannot be requested, or None.

    The message names the header and shows the value as received (``received_url``).
    """
    where = "the create URL" if named.header == "request" else f"header {named.header!r}"
    if len(named.received) > MAX_HEADER or len(named.url) > MAX_URL:
        size = max(len(named.received), len(named.url))
        return f"{where} is {size} characters, above the {MAX_HEADER}-character bound"
    if not usable_url(named.url):
        return f"{where} is not a usable URL: {received_url(named.received)}"
    if not on_allowed_origin(named.url, base_url, extra):
        return (
            f"{where} names a URL on an origin the contract does not allow: "
            f"{received_url(named.received)}"
        )
    return None


def ignored_headers(headers: Mapping[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """The named headers present, each value bounded as the history shows it."""
    out: dict[str, str] = {}
    for name in names:
        value = headers.get(name)
        if isinstance(value, str) and value.strip():
            out[name] = received_url(value.strip())
    return out


def with_api_version(url: str, request_url: str) -> str:
    """[SDK] ``url`` with the request's ``api-version`` added when it carries none."""
    try:
        wanted = dict(parse_qsl(urlsplit(request_url).query)).get("api-version")
        parts = urlsplit(url)
    except ValueError:
        return url
    if not wanted or any(k.lower() == "api-version" for k, _ in parse_qsl(parts.query)):
        return url
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit(parts._replace(query=query + urlencode({"api-version": wanted})))
