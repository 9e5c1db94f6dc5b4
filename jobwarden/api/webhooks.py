"""Webhook receiver: POST /v1/webhooks/{provider} (issue 10, item 10)."""

from fastapi import APIRouter

router = APIRouter()
