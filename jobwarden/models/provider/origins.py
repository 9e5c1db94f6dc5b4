"""Origins: where a URL a provider names may take the credential (invariant 10).

Every URL jobwarden requests is checked here before a request is built: a
status URL from a header, a result reference, a cancel or lookup path. The
default allowed origin is the contract's base URL (scheme, host and port).
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

# 16 KiB: Microsoft's ARM scenario LargeHeaders_two6k names monitors of over 6 KiB.
MAX_URL = 16 * 1024
# Query parameters of a URL that carries its own authorization: S3 presigned (SigV4,
# "X-Amz-Signature"), Google Cloud Storage V4 signed ("X-Goog-Signature") and Azure SAS
# ("sig"). Such a URL is the only credential its request may carry (S3 refuses a second
# mechanism: "Only one auth mechanism allowed").
SIGNED_QUERY = frozenset({"x-amz-signature", "x-goog-signature", "sig"})


def origin_of(url: str) -> str | None:
    """scheme://host[:port] of an absolute http(s) URL, lower-cased; None otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    default = {"http": 80, "https": 443}[parts.scheme]
    suffix = f":{port}" if port is not None and port != default else ""
    return f"{parts.scheme}://{parts.hostname.lower()}{suffix}"


def on_allowed_origin(url: str, base_url: str, extra: tuple[str, ...] = ()) -> bool:
    """Invariant 10: the credential goes only to the contract's own origin (or ``extra``)."""
    origin = origin_of(url)
    allowed = {origin_of(base_url), *(origin_of(o) for o in extra)}
    return origin is not None and origin in allowed


def shown_url(url: str) -> str:
    """A URL as the history may show it: no userinfo, no query, no fragment, bounded."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return repr(url[:200])
    shown = f"{parts.scheme}://{host}{port}{parts.path}"[:300]
    # A hostile URL may carry control characters: shown escaped, never raw.
    return shown if shown.isprintable() and shown.isascii() else ascii(shown)


def usable_url(url: str) -> bool:
    """Printable, bounded, no whitespace or control characters: what httpx can send as is."""
    return 0 < len(url) <= MAX_URL and url.isascii() and url.isprintable() and " " not in url


def takes_credential(url: str, base_url: str) -> bool:
    """Whether the provider's credential may ride on a request to ``url``: only to the
    provider's own origin, and never with a URL that authorizes itself. A storage host
    the contract allows (``result.allowed_origins``) is fetched without it: allowed to be
    read from is not allowed to receive the provider's secret (invariant 10)."""
    if origin_of(url) != origin_of(base_url):
        return False
    try:
        names = {name.lower() for name, _ in parse_qsl(urlsplit(url).query)}
    except ValueError:
        return False
    return not names & SIGNED_QUERY
