"""The sandbox's webhook sender: a delivery for each job state change, signed two ways.

A create's ``behaviour.webhook`` object turns it on for that job::

    {"url": "http://127.0.0.1:8000/v1/webhooks/sandbox_hooks",
     "scheme": "standard",      # or "hmac"
     "duplicate": false,        # every delivery sent twice (same event id: a retry)
     "out_of_order": false,     # after the result is downloaded, a late "running" event
     "forged": false,           # every delivery signed with the wrong key
     "stale": false}            # every delivery signed an hour ago (past any test tolerance)

Schemes: ``standard`` is Standard Webhooks 1.0 (webhook-id, webhook-timestamp,
webhook-signature ``v1,<base64>`` over ``id.timestamp.body``, signed with the
standardwebhooks library); ``hmac`` is HMAC-SHA256 over ``timestamp.body`` in hex,
in ``X-Sandbox-Signature`` and ``X-Sandbox-Timestamp``. The signing secret is the
server's (``SandboxServer(webhook_secret=...)``), never part of a job's command:
commands are stored by jobwarden, secrets never are.

Deliveries leave from one background thread, in order, and every attempt is kept
in a delivery log (``GET /_sandbox/webhooks?job=``) with the answer it got.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import queue
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from urllib.parse import urlsplit

from standardwebhooks.webhooks import Webhook

SCHEMES: Final = ("standard", "hmac")
HMAC_SIGNATURE_HEADER: Final = "X-Sandbox-Signature"
HMAC_TIMESTAMP_HEADER: Final = "X-Sandbox-Timestamp"
STALE_SECONDS: Final = 3600  # older than the tolerance of every test contract (300 s)
_FORGED_KEY: Final = b"not-the-receivers-key-not-the-receivers"
_ANSWER_LIMIT: Final = 64 * 1024
_KEYS: Final = frozenset({"url", "scheme", "duplicate", "out_of_order", "forged", "stale"})


class WebhookOptionError(ValueError):
    """``behaviour.webhook`` is malformed; the message names the field."""


@dataclass(frozen=True)
class WebhookBehaviour:
    url: str
    scheme: str = "standard"
    duplicate: bool = False
    out_of_order: bool = False
    forged: bool = False
    stale: bool = False


def parse_webhook_option(raw: Any) -> WebhookBehaviour | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise WebhookOptionError("behaviour.webhook must be an object")
    unknown = set(raw) - _KEYS
    if unknown:
        raise WebhookOptionError(f"behaviour.webhook: unknown keys {sorted(unknown)}")
    url = raw.get("url")
    if not isinstance(url, str) or urlsplit(url).scheme not in ("http", "https"):
        raise WebhookOptionError("behaviour.webhook.url must be an http(s) URL")
    scheme = raw.get("scheme", "standard")
    if scheme not in SCHEMES:
        raise WebhookOptionError(f"behaviour.webhook.scheme must be one of {', '.join(SCHEMES)}")
    flags = {}
    for name in ("duplicate", "out_of_order", "forged", "stale"):
        value = raw.get(name, False)
        if not isinstance(value, bool):
            raise WebhookOptionError(f"behaviour.webhook.{name} must be a boolean")
        flags[name] = value
    return WebhookBehaviour(url=url, scheme=scheme, **flags)


def event_body(event_id: str, job_id: str, status: str, occurred_at: datetime) -> bytes:
    """The payload: Standard Webhooks' recommended shape (type, timestamp, data at the top)."""
    return json.dumps(
        {
            "id": event_id,
            "type": "job.status_changed",
            "timestamp": occurred_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "job": {"id": job_id, "status": status},
        },
        separators=(",", ":"),
    ).encode()


def signed_delivery(
    scheme: str,
    secret: str,
    event_id: str,
    job_id: str,
    status: str,
    *,
    variant: str = "genuine",
    now: datetime | None = None,
    occurred_at: datetime | None = None,
) -> tuple[dict[str, str], bytes]:
    """(headers, body) of one delivery; ``variant`` forged or stale spoils it on purpose."""
    sent = now or datetime.now(UTC)
    body = event_body(event_id, job_id, status, occurred_at or sent)
    signed_at = sent - timedelta(seconds=STALE_SECONDS) if variant == "stale" else sent
    timestamp = str(int(signed_at.timestamp()))
    headers = {"Content-Type": "application/json"}
    if scheme == "standard":
        signer = Webhook(_FORGED_KEY) if variant == "forged" else Webhook(secret)
        signed = datetime.fromtimestamp(int(timestamp), UTC)
        headers |= {
            "webhook-id": event_id,
            "webhook-timestamp": timestamp,
            "webhook-signature": signer.sign(event_id, signed, body.decode()),
        }
    else:
        key = _FORGED_KEY if variant == "forged" else secret.encode()
        mac = hmac.new(key, timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
        headers |= {HMAC_SIGNATURE_HEADER: mac, HMAC_TIMESTAMP_HEADER: timestamp}
    return headers, body


def new_event_id() -> str:
    return f"evt_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class _Outgoing:
    option: WebhookBehaviour
    job_id: str
    status: str
    event_id: str
    variant: str
    occurred_at: datetime


class WebhookSender:
    """Sends queued deliveries in order from one daemon thread; logs every attempt."""

    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret
        self._queue: queue.Queue[_Outgoing | None] = queue.Queue()
        self._lock = threading.Lock()
        self._log: list[dict[str, Any]] = []
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    def job_changed(self, option: WebhookBehaviour, job_id: str, status: str) -> None:
        """Queue the delivery (twice with ``duplicate``) of one state change; never blocks."""
        variant = "forged" if option.forged else "stale" if option.stale else "genuine"
        event = _Outgoing(option, job_id, status, new_event_id(), variant, datetime.now(UTC))
        self._put(event)
        if option.duplicate:
            self._put(
                _Outgoing(option, job_id, status, event.event_id, "duplicate", event.occurred_at)
            )

    def late_event(
        self, option: WebhookBehaviour, job_id: str, status: str, occurred_at: datetime
    ) -> None:
        """An event that happened long ago, delivered now: out of order."""
        self._put(_Outgoing(option, job_id, status, new_event_id(), "out_of_order", occurred_at))

    def deliveries(self, job_id: str | None = None) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(d) for d in self._log if job_id is None or d["job_id"] == job_id]

    def reset(self) -> None:
        with self._lock:
            self._log.clear()

    def stop(self) -> None:
        self._stopped.set()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _put(self, item: _Outgoing) -> None:
        with self._lock:
            if self._thread is None and not self._stopped.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="sandbox-webhooks", daemon=True
                )
                self._thread.start()
        self._queue.put(item)

    def _run(self) -> None:
        while not self._stopped.is_set():
            item = self._queue.get()
            if item is None:
                return
            self._send(item)

    def _send(self, item: _Outgoing) -> None:
        entry: dict[str, Any] = {
            "job_id": item.job_id,
            "event_id": item.event_id,
            "job_status": item.status,
            "variant": item.variant,
            "scheme": item.option.scheme,
            "url": item.option.url,
            "monotonic": time.monotonic(),
            "time": datetime.now(UTC).isoformat(),
            "http_status": None,
            "answer": None,
            "error": None,
            "answered": None,
        }
        with self._lock:
            entry["seq"] = len(self._log) + 1
            self._log.append(entry)
        if self.secret is None:
            self._finish(entry, error="no webhook secret configured on the sandbox")
            return
        spoil = item.variant if item.variant in ("forged", "stale") else "genuine"
        headers, body = signed_delivery(
            item.option.scheme,
            self.secret,
            item.event_id,
            item.job_id,
            item.status,
            variant=spoil,
            occurred_at=item.occurred_at,
        )
        request = urllib.request.Request(item.option.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=15) as answer:
                self._finish(entry, status=answer.status, answer=answer.read(_ANSWER_LIMIT))
        except urllib.error.HTTPError as exc:
            self._finish(entry, status=exc.code, answer=exc.read(_ANSWER_LIMIT))
        except OSError as exc:
            self._finish(entry, error=type(exc).__name__)

    def _finish(
        self,
        entry: dict[str, Any],
        *,
        status: int | None = None,
        answer: bytes | None = None,
        error: str | None = None,
    ) -> None:
        parsed: Any = None
        if answer:
            try:
                parsed = json.loads(answer)
            except ValueError:
                parsed = answer[:200].decode("utf-8", "replace")
        with self._lock:
            entry.update(http_status=status, answer=parsed, error=error, answered=time.monotonic())
