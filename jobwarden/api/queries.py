"""Read routes: an operation, a tenant's operations, its story, escalations (issue 10, item 4)."""

from fastapi import APIRouter

router = APIRouter()
