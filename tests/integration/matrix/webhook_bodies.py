"""Webhook deliveries for the matrix: the sandbox's own signer, and any bytes signed alike."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from jobwarden.demo.sandbox.webhooks import (
    HMAC_SIGNATURE_HEADER,
    HMAC_TIMESTAMP_HEADER,
    signed_delivery,
)


def delivery(secret: str, job_id: str, status: str) -> tuple[dict[str, str], bytes]:
    """A genuine HMAC delivery about ``job_id`` with a fresh event id."""
    return signed_delivery("hmac", secret, f"evt_{secrets.token_hex(6)}", job_id, status)


def signed(secret: str, body: bytes) -> dict[str, str]:
    """Headers that sign ``body`` as the sandbox's HMAC scheme does (timestamp "." body):
    hostile bytes that pass verification, so the receiver must read them, not refuse them."""
    timestamp = str(int(time.time()))
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        HMAC_SIGNATURE_HEADER: mac,
        HMAC_TIMESTAMP_HEADER: timestamp,
    }
