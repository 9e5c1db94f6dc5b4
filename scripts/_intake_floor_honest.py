"""The honest intake floor: issue 37's hand-written reference in scripts/bench_intake.py.

scripts/_intake_floor.py is the bare floor: a bearer check against a constant and a
claim. This endpoint does, by hand, the work an intake that keeps DESIGN.md's promises
cannot skip, and nothing more:

- the bearer token authenticated against a token table (its sha256 looked up, scope
  and revocation checked): 1 statement, no cache;
- the command validated against a JSON Schema (a compiled validator; 422 with the
  failing field);
- the submission fingerprinted as sha256 of its RFC 8785 bytes;
- the operation row and its first chained event (``sha256(prev_hash || RFC 8785
  event)``, a foreign key to the operation, an append-only trigger) inserted by one
  statement in autocommit: ``WITH claimed AS (INSERT ... ON CONFLICT DO NOTHING
  RETURNING ...) INSERT INTO events ... SELECT ... FROM claimed``; 1 statement;
- one Celery publish of the new operation's id, 201.

So 2 statements per new submission. A replayed key reads the stored operation back (a
third statement), answers 201 with ``Idempotent-Replayed: true`` when the fingerprint
matches and 409 when it does not, without a publish. Same server shape as the bare
floor (sync endpoint, one psycopg connection per threadpool thread, uvicorn with
httptools and no access log). Configured from BENCH_INTAKE_FLOOR_* variables (no token:
the bench inserts the token's hash with ``TOKEN_ROW``).
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid
from typing import Any

import jsonschema
import psycopg
import rfc8785
from celery import Celery
from fastapi import FastAPI, Header
from fastapi.responses import JSONResponse
from psycopg.types.json import Jsonb
from pydantic import BaseModel

GENESIS = b"\x00" * 32  # the prev_hash of an operation's first event

SCHEMA = """
CREATE TABLE IF NOT EXISTS honest_tokens (
    token_hash bytea PRIMARY KEY, tenant text NOT NULL, scopes text[] NOT NULL,
    revoked_at timestamptz
);
CREATE TABLE IF NOT EXISTS honest_operations (
    operation_id uuid PRIMARY KEY, tenant text NOT NULL, idempotency_key text NOT NULL,
    provider text NOT NULL, command jsonb NOT NULL, fingerprint bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(), UNIQUE (tenant, idempotency_key)
);
CREATE TABLE IF NOT EXISTS honest_events (
    id bigserial PRIMARY KEY,
    operation_id uuid NOT NULL REFERENCES honest_operations (operation_id),
    seq bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(),
    prev_hash bytea NOT NULL, hash bytea NOT NULL, body jsonb NOT NULL,
    UNIQUE (operation_id, seq)
);
CREATE OR REPLACE FUNCTION honest_events_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'honest_events is append-only';
END $$;
DROP TRIGGER IF EXISTS honest_events_append_only ON honest_events;
CREATE TRIGGER honest_events_append_only BEFORE UPDATE OR DELETE ON honest_events
    FOR EACH ROW EXECUTE FUNCTION honest_events_append_only();
"""
TOKEN_ROW = "INSERT INTO honest_tokens (token_hash, tenant, scopes) VALUES (%s, %s, %s)"
AUTHENTICATE = (
    "SELECT tenant FROM honest_tokens"
    " WHERE token_hash = %s AND revoked_at IS NULL AND %s = ANY(scopes)"
)
# The claim and the first event in one statement: an existing (tenant, key) claims no
# row, so no event is written either, and the statement returns nothing.
CLAIM = """
WITH claimed AS (
    INSERT INTO honest_operations
        (operation_id, tenant, idempotency_key, provider, command, fingerprint)
    VALUES (%(op)s, %(tenant)s, %(key)s, %(provider)s, %(command)s, %(fingerprint)s)
    ON CONFLICT DO NOTHING
 RETURNING operation_id
)
INSERT INTO honest_events (operation_id, seq, prev_hash, hash, body)
SELECT operation_id, 1, %(prev)s, %(hash)s, %(event)s FROM claimed
RETURNING operation_id
"""
STORED = (
    "SELECT operation_id, fingerprint FROM honest_operations"
    " WHERE tenant = %s AND idempotency_key = %s"
)
# What the bench submits (scripts/bench_intake.py's _command): a provider's command
# schema as a contract would declare it.
COMMAND_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["kind", "behaviour"],
    "properties": {
        "kind": {"type": "string", "minLength": 1},
        "behaviour": {"type": "object"},
        "n": {"type": "integer", "minimum": 0},
    },
    "additionalProperties": False,
}


class Submission(BaseModel):
    provider: str
    command: dict[str, Any]


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def fingerprint(provider: str, command: dict[str, Any]) -> bytes:
    """sha256 of the submission's RFC 8785 bytes: a replay with another body is a 409."""
    return hashlib.sha256(rfc8785.dumps({"provider": provider, "command": command})).digest()


def first_event(operation_id: uuid.UUID, tenant: str, print_: bytes) -> dict[str, Any]:
    return {
        "kind": "submitted",
        "operation_id": str(operation_id),
        "seq": 1,
        "tenant": tenant,
        "fingerprint": print_.hex(),
    }


def chained_hash(prev: bytes, event: dict[str, Any]) -> bytes:
    """``sha256(prev_hash || RFC 8785 bytes of the event)``."""
    return hashlib.sha256(prev + rfc8785.dumps(event)).digest()


def create_app() -> FastAPI:
    """One app per uvicorn worker process: its Celery producer and connections are its own."""
    dsn = os.environ["BENCH_INTAKE_FLOOR_DSN"]
    prefix = os.environ["BENCH_INTAKE_FLOOR_PREFIX"]
    broker = Celery("intake-floor-honest", broker=os.environ["BENCH_INTAKE_FLOOR_BROKER"])
    broker.conf.update(
        task_serializer="json",
        broker_transport_options={"global_keyprefix": f"{prefix}:celery:"},
        broker_connection_retry_on_startup=True,
    )
    validator = jsonschema.Draft202012Validator(COMMAND_SCHEMA)
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
        scheme, _, token = authorization.partition(" ")
        if scheme != "Bearer" or not token:
            return JSONResponse({"detail": "unauthorized"}, status_code=401)
        conn = connection()
        row = conn.execute(AUTHENTICATE, (token_hash(token), "submit")).fetchone()
        if row is None:
            return JSONResponse({"detail": "unauthorized"}, status_code=401)
        tenant = str(row[0])
        error = next(iter(validator.iter_errors(body.command)), None)
        if error is not None:
            field = "/".join(str(p) for p in error.absolute_path) or "command"
            return JSONResponse({"detail": f"{field}: {error.message}"}, status_code=422)
        print_ = fingerprint(body.provider, body.command)
        fresh = uuid.uuid4()
        event = first_event(fresh, tenant, print_)
        claimed = conn.execute(
            CLAIM,
            {
                "op": fresh,
                "tenant": tenant,
                "key": idempotency_key,
                "provider": body.provider,
                "command": Jsonb(body.command),
                "fingerprint": print_,
                "prev": GENESIS,
                "hash": chained_hash(GENESIS, event),
                "event": Jsonb(event),
            },
        ).fetchone()
        if claimed is None:
            stored = conn.execute(STORED, (tenant, idempotency_key)).fetchone()
            assert stored is not None  # a claimed key is never deleted
            if bytes(stored[1]) != print_:
                return JSONResponse(
                    {"detail": "Idempotency-Key: reused with another submission"},
                    status_code=409,
                )
            return JSONResponse(
                {"operation_id": str(stored[0]), "outcome": "replayed"},
                status_code=201,
                headers={"Idempotent-Replayed": "true"},
            )
        broker.send_task("floor.wake", args=[str(fresh)], queue=prefix)
        return JSONResponse({"operation_id": str(fresh), "outcome": "created"}, status_code=201)

    return app
