"""Action routes: cancel, approvals, decisions (issue 10, item 5)."""

from fastapi import APIRouter

router = APIRouter()
