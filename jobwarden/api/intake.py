"""POST /v1/operations: the HTTP door of intake (issue 10, item 3)."""

from fastapi import APIRouter

router = APIRouter()
