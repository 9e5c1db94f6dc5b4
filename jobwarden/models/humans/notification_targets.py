"""Per-tenant notification targets, read from the file JOBWARDEN_NOTIFICATIONS_FILE names.

    [tenants.billing]
    url = "https://hooks.example.com/jobwarden"    # Standard Webhooks POST
    secret_env = "BILLING_WEBHOOK_SECRET"          # or secret_file = "/run/secrets/…"
    apprise_urls_env = "BILLING_APPRISE_URLS"      # optional: chat / email

Secrets and Apprise URLs (which carry credentials) are named, never written here
(invariant 9): the relay reads them when it sends, so a rotated secret is used from
the next attempt on. Validated at load; every error names the file and the field.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jobwarden.models.errors import NotificationConfigError

_FIELDS = frozenset({"url", "secret_env", "secret_file", "apprise_urls_env"})


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantTargets:
    tenant: str
    url: str | None = None  # the webhook receiver; None: no webhook channel
    secret_env: str | None = None
    secret_file: Path | None = None
    apprise_urls_env: str | None = None  # a variable holding Apprise URLs, comma-separated


@dataclass(frozen=True, slots=True, kw_only=True)
class Targets:
    tenants: Mapping[str, TenantTargets]

    def of(self, tenant: str) -> TenantTargets | None:
        return self.tenants.get(tenant)


NO_TARGETS = Targets(tenants={})


def _text(where: str, table: Mapping[str, Any], name: str) -> str | None:
    value = table.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise NotificationConfigError(f"{where}.{name}: must be a non-empty string")
    return value


def _tenant(file: str, tenant: str, table: object) -> TenantTargets:
    where = f"{file}: tenants.{tenant}"
    if not isinstance(table, dict):
        raise NotificationConfigError(f"{where}: must be a table")
    unknown = sorted(set(table) - _FIELDS)
    if unknown:
        raise NotificationConfigError(f"{where}.{unknown[0]}: unknown field")
    url = _text(where, table, "url")
    secret_env = _text(where, table, "secret_env")
    secret_file = _text(where, table, "secret_file")
    apprise = _text(where, table, "apprise_urls_env")
    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise NotificationConfigError(f"{where}.url: must be an absolute http(s) URL")
        if parts.username or parts.password:
            # A credential in the URL would rest in this file and in logs: name it instead.
            raise NotificationConfigError(f"{where}.url: must not carry a user or password")
        if (secret_env is None) == (secret_file is None):
            raise NotificationConfigError(
                f"{where}.secret_env: give exactly one of secret_env or secret_file with url"
            )
    elif secret_env is not None or secret_file is not None:
        raise NotificationConfigError(f"{where}.url: a signing secret needs a url")
    if url is None and apprise is None:
        raise NotificationConfigError(f"{where}: names neither url nor apprise_urls_env")
    return TenantTargets(
        tenant=tenant,
        url=url,
        secret_env=secret_env,
        secret_file=Path(secret_file) if secret_file is not None else None,
        apprise_urls_env=apprise,
    )


def parse_targets(text: str, *, file: str) -> Targets:
    """The targets in ``text`` (TOML); NotificationConfigError naming file and field."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise NotificationConfigError(f"{file}: not valid TOML: {exc}") from None
    unknown = sorted(set(doc) - {"tenants"})
    if unknown:
        raise NotificationConfigError(f"{file}: {unknown[0]}: unknown table")
    tenants = doc.get("tenants", {})
    if not isinstance(tenants, dict):
        raise NotificationConfigError(f"{file}: tenants: must be a table")
    return Targets(tenants={name: _tenant(file, name, t) for name, t in tenants.items()})


def load_targets(path: Path | None) -> Targets:
    """Read and validate the file; no file configured: no targets (rows end no_target)."""
    if path is None:
        return NO_TARGETS
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise NotificationConfigError(f"{path}: cannot be read ({exc.strerror})") from None
    return parse_targets(text, file=str(path))
