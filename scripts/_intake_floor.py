"""The hand-written FastAPI endpoint scripts/bench_intake.py measures jobwarden's HTTP door
against (issue 23): the least an HTTP intake with an idempotency key can do.

``POST /v1/operations``: one bearer check against a constant, the JSON body parsed by a
pydantic model, one ``INSERT ... ON CONFLICT DO NOTHING`` claiming (tenant, key) in a
table of its own (autocommit: one round trip, one commit), one Celery publish of the new
operation's id, 201 with a small JSON body. A replayed key reads the stored operation
id back (a second round trip) and answers 201 with ``Idempotent-Replayed: true``,
without a publish. No fingerprint, no validation of the command, no intake log, no
tracing. A sync endpoint on FastAPI's threadpool with one psycopg connection per
thread, as such an app is usually written; run under uvicorn with httptools, without
an access log, as ``jobwarden api`` is. Configured from BENCH_INTAKE_FLOOR_* variables.

    BENCH_INTAKE_FLOOR_DSN=... BENCH_INTAKE_FLOOR_TOKEN=... BENCH_INTAKE_FLOOR_BROKER=... \\
    BENCH_INTAKE_FLOOR_PREFIX=... .venv/bin/python -m uvicorn _intake_floor:create_app --factory
"""

from __future__ import annotations

import hmac
import os
import threading
import uuid
from typing import Any

import psycopg
from celery import Celery
from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse
from psycopg.types.json import Jsonb
from pydantic import BaseModel

SCHEMA = """
CREATE TABLE IF NOT EXISTS floor_intake (
    tenant text NOT NULL, idempotency_key text NOT NULL, operation_id uuid NOT NULL,
    provider text NOT NULL, command jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, idempotency_key)
)
"""
CLAIM = (
    "INSERT INTO floor_intake (tenant, idempotency_key, operation_id, provider, command)"
    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING operation_id"
)
STORED = "SELECT operation_id FROM floor_intake WHERE tenant = %s AND idempotency_key = %s"
TENANT = "bench"


class Submission(BaseModel):
    provider: str
    command: dict[str, Any]


def create_app() -> FastAPI:
    """One app per uvicorn worker process: its Celery producer and connections are its own."""
    token = os.environ["BENCH_INTAKE_FLOOR_TOKEN"]
    dsn = os.environ["BENCH_INTAKE_FLOOR_DSN"]
    prefix = os.environ["BENCH_INTAKE_FLOOR_PREFIX"]
    broker = Celery("intake-floor", broker=os.environ["BENCH_INTAKE_FLOOR_BROKER"])
    broker.conf.update(
        task_serializer="json",
        broker_transport_options={"global_keyprefix": f"{prefix}:celery:"},
        broker_connection_retry_on_startup=True,
    )
    local = threading.local()

    def connection() -> psycopg.Connection[Any]:
        # One per threadpool thread, made on its first request (after uvicorn's fork).
        conn: psycopg.Connection[Any] | None = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = psycopg.connect(dsn, autocommit=True)
        return conn

    app = FastAPI()

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/operations", status_code=201)
    def submit(
        body: Submission,
        authorization: str = Header(""),
        idempotency_key: str = Header(..., alias="Idempotency-Key"),
    ) -> JSONResponse:
        if not hmac.compare_digest(authorization, f"Bearer {token}"):
            return JSONResponse({"detail": "unauthorized"}, status_code=401)
        conn = connection()
        fresh = uuid.uuid4()
        claimed = conn.execute(
            CLAIM,
            (TENANT, idempotency_key, fresh, body.provider, Jsonb(body.command)),
        ).fetchone()
        if claimed is None:
            stored = conn.execute(STORED, (TENANT, idempotency_key)).fetchone()
            assert stored is not None  # a claimed key is never deleted
            return JSONResponse(
                {"operation_id": str(stored[0]), "outcome": "replayed"},
                status_code=201,
                headers={"Idempotent-Replayed": "true"},
            )
        broker.send_task("floor.wake", args=[str(fresh)], queue=prefix)
        return JSONResponse({"operation_id": str(fresh), "outcome": "created"}, status_code=201)

    return app
