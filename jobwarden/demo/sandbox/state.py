"""Job table and request log of the sandbox provider, and its API methods.

A job and its scripted behaviour are ``sandbox/jobs.py``; what an answer is,
``sandbox/replies.py``.

Everything here is transport-free: each API method takes what the HTTP layer
parsed and returns a :class:`Reply` saying what to send (or to drop the
connection, or to hold first). One lock guards the job table and the log; no
method sleeps, so the lock is never held while a response is being delayed.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from jobwarden.demo.sandbox import conventions, downloads, hostile
from jobwarden.demo.sandbox.behaviour import Behaviour, BehaviourError, parse_behaviour
from jobwarden.demo.sandbox.jobs import (
    FINAL_STATUSES,
    Job,
    build_result,
    repeatability_problem,
    slipping_eta,
    streamed_result,
    time_driven_progress,
)
from jobwarden.demo.sandbox.replies import (
    Reply,
    error_reply,
    iso_utc,
    json_reply,
    retry_after_value,
    transport_mode,
)
from jobwarden.demo.sandbox.shapes import shape_fields
from jobwarden.demo.sandbox.webhooks import WebhookSender


class SandboxState:
    """The provider's memory: jobs by id and by idempotency key, and the request log."""

    def __init__(self, webhook_secret: str | None = None) -> None:
        self._lock = threading.Lock()
        # Deliveries leave from the sender's thread, never under this lock's holder's call.
        self.webhooks = WebhookSender(webhook_secret)
        self._jobs: dict[str, Job] = {}
        self._by_key: dict[str, Job] = {}
        self._log: dict[int, dict[str, Any]] = {}
        self._seq = 0  # never reset, so an in-flight request cannot touch a new entry
        # A scripted outage: every status read answers this status (503), logged as always,
        # until it is set back to None (the provider breaker's test, test_breaker.py).
        self.outage: int | None = None
        self._url_secret = secrets.token_bytes(32)  # signs presigned result URLs

    # ----------------------------------------------------------------- log
    def log_request(
        self,
        *,
        method: str,
        path: str,
        query: str | None,
        kind: str,
        idempotency_key: str | None,
        job_id: str | None,
        traceparent: str | None,
        host: str | None = None,
        authorized: bool = False,
        first_sent: str | None = None,
        accept_encoding: str | None = None,
        headers: list[tuple[str, str]] | None = None,
        body_b64: str | None = None,
    ) -> int:
        now = datetime.now(UTC)
        with self._lock:
            self._seq += 1
            seq = self._seq
            self._log[seq] = {
                "seq": seq,
                "time": iso_utc(now),
                "monotonic": time.monotonic(),
                "method": method,
                "path": path,
                "query": query,
                "kind": kind,
                "idempotency_key": idempotency_key,
                "job_id": job_id,
                "status": None,
                "retry_after": None,
                "traceparent": traceparent,
                "first_sent": first_sent,
                "accept_encoding": accept_encoding,  # digests cover the bytes as sent
                "replayed": False,
                "host": host,  # whom the client thought it was talking to
                "authorized": authorized,  # an Authorization header arrived (never its value)
                "ended": None,  # monotonic time the exchange ended (answered, dropped, left)
                # Monotonic time just before the answer's bytes were written: the client
                # cannot have had its answer earlier (a lower bound, unlike "ended", which
                # a loaded machine can take well after the client read the answer).
                "answering": None,
                # Every header as received (Authorization as a digest, never its value) and
                # the body bytes: what an approval showed is compared with these.
                "headers": headers or [],
                "body_b64": body_b64,
            }
        return seq

    def answered(self, seq: int, status: int, retry_after: str | None) -> None:
        with self._lock:
            entry = self._log.get(seq)
            if entry is not None:
                entry["status"] = status
                entry["retry_after"] = retry_after
                entry["answering"] = time.monotonic()

    def ended(self, seq: int) -> None:
        with self._lock:
            entry = self._log.get(seq)
            if entry is not None:
                entry["ended"] = time.monotonic()

    def _note(self, seq: int, **fields: Any) -> None:
        entry = self._log.get(seq)  # caller holds the lock
        if entry is not None:
            entry.update(fields)

    def requests(
        self, *, key: str | None = None, job_id: str | None = None
    ) -> list[dict[str, Any]]:
        with self._lock:
            return [
                dict(entry)
                for entry in self._log.values()
                if (key is None or entry["idempotency_key"] == key)
                and (job_id is None or entry["job_id"] == job_id)
            ]

    def jobs_for_key(self, key: str | None) -> list[dict[str, Any]]:
        with self._lock:
            return [job.public() for job in self._jobs.values() if key is None or job.key == key]

    def reset(self) -> None:
        with self._lock:
            self._jobs.clear()
            self._by_key.clear()
            self._log.clear()
        self.webhooks.reset()

    # ----------------------------------------------------------------- webhooks
    def _notify(self, job: Job, status: str) -> None:
        """Announce a state change by webhook, once per change (caller holds the lock)."""
        option = job.behaviour.webhook
        if option is None or status == job.notified:
            return
        job.notified = status
        self.webhooks.job_changed(option, job.id, status)

    def tick(self, job_id: str) -> None:
        """A time-scripted job finishes on its own, polled or not, and says so by webhook."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.final is not None or job.cancel_requested:
                return
            if self._finished(job, job.status_calls):
                job.final = job.behaviour.outcome
                self._notify(job, job.final)

    # ----------------------------------------------------------------- API
    def create(
        self, seq: int, key: str | None, raw_body: bytes, first_sent: str | None = None
    ) -> Reply:
        if not key:
            return error_reply(400, "idempotency_key_required", "send an Idempotency-Key header")
        try:
            command = json.loads(raw_body)
        except (ValueError, UnicodeDecodeError):
            return error_reply(400, "invalid_json", "the body must be a JSON object")
        if not isinstance(command, dict):
            return error_reply(400, "invalid_json", "the body must be a JSON object")
        try:
            behaviour = parse_behaviour(command.get("behaviour"))
        except BehaviourError as exc:
            return error_reply(400, "invalid_behaviour", str(exc))
        refused = repeatability_problem(behaviour, key, first_sent)
        if refused is not None:
            return refused
        canonical = json.dumps(command, sort_keys=True)
        # A generated result is hashed here, before the lock: seconds at a few GB.
        streamed = streamed_result(behaviour)
        with self._lock:
            existing = self._by_key.get(key)
            if existing is not None:
                if existing.canonical != canonical:
                    return error_reply(
                        422, "idempotency_key_reused", "this key was used with a different body"
                    )
                if behaviour.require_repeatability and first_sent != existing.first_sent:
                    # OASIS Repeatable Requests: a repeat must carry the first-sent time.
                    return error_reply(
                        400, "repeatability_mismatch", "Repeatability-First-Sent changed"
                    )
                in_flight = behaviour.in_flight_seconds
                if in_flight is not None and time.monotonic() - existing.created_mono < in_flight:
                    # IETF Idempotency-Key draft: the first request is still being processed.
                    self._note(seq, job_id=existing.id, replayed=True)
                    return error_reply(
                        409,
                        "idempotency_key_in_use",
                        "a request with this key is still being processed",
                        **{"Retry-After": "1"},
                    )
                existing.create_requests += 1
                self._note(seq, job_id=existing.id, replayed=True)
                headers = {**existing.create_headers(), "Idempotent-Replayed": "true"}
                replay = Reply(status=202, body=existing.create_body, headers=headers)
                return transport_mode(
                    replay, behaviour.hostile_create, behaviour, existing.create_fields()
                )
            job = self._new_job(key, canonical, command, behaviour, streamed)
            job.first_sent = first_sent
            self._note(seq, job_id=job.id)
            if behaviour.synchronous:
                # The create answer is the finished job: no status read is needed.
                job.final = behaviour.outcome
                return self._status_reply(job, job.final, 100 if behaviour.progress else None)
        if behaviour.webhook is not None and behaviour.seconds_to_finish is not None:
            # A little after the scripted finish, so _finished agrees when it fires.
            timer = threading.Timer(behaviour.seconds_to_finish + 0.01, self.tick, (job.id,))
            timer.daemon = True
            timer.start()
        reply = Reply(status=202, body=job.create_body, headers=job.create_headers())
        transport_mode(reply, behaviour.hostile_create, behaviour, job.create_fields())
        if behaviour.create_response == "drop":
            reply.drop = True
        elif behaviour.create_response == "hold":
            reply.hold_seconds = behaviour.hold_seconds
        return reply

    def _new_job(
        self,
        key: str,
        canonical: str,
        command: dict[str, Any],
        behaviour: Behaviour,
        streamed: tuple[hostile.Generator, int, str] | None = None,
    ) -> Job:
        job_id = hostile.job_id(f"job_{uuid.uuid4().hex[:12]}", behaviour.job_id_style)
        while job_id in self._jobs:  # pragma: no cover - 48 random bits
            job_id = hostile.job_id(f"job_{uuid.uuid4().hex[:12]}", behaviour.job_id_style)
        created = datetime.now(UTC)
        body: dict[str, Any] = {"id": job_id, "status": "queued", "created_at": iso_utc(created)}
        if behaviour.hostile_create == "big_numbers":
            body.update(hostile.BIG_NUMBERS)
        result = build_result(job_id, behaviour, shape_fields(command))
        stream, length, digest = streamed or (None, 0, hashlib.sha256(result).hexdigest())
        job = Job(
            id=job_id,
            key=key,
            canonical=canonical,
            command=command,
            behaviour=behaviour,
            created_at=created,
            created_mono=time.monotonic(),
            create_body=json.dumps(body).encode(),
            result_bytes=result,
            result_sha256=digest,
            result_stream=stream,
            result_length=length,
        )
        self._jobs[job_id] = job
        self._by_key[key] = job
        return job

    def status(
        self,
        seq: int,
        job_id: str,
        *,
        after_hold: bool = False,
        authorization: str | None = None,
        origin: str | None = None,
    ) -> Reply:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return error_reply(404, "not_found", f"no job {job_id}")
            b = job.behaviour
            if not after_hold:
                scripted = b.status_error_for(job.error_calls)
                if scripted is not None:
                    job.error_calls += 1
                    if scripted.code == "drop":
                        return Reply(drop=True)
                    if scripted.code == "malformed":
                        return Reply(
                            status=200,
                            body=b'{"status": "running", "progress": 4',
                            headers={"Content-Type": "application/json"},
                        )
                    if scripted.code == "hold":
                        return Reply(hold_seconds=scripted.hold_seconds, reprocess_status=True)
                    assert isinstance(scripted.code, int)
                    retry = retry_after_value(scripted.retry_after, scripted.retry_after_date)
                    headers = {"Retry-After": retry} if retry is not None else {}
                    return error_reply(
                        scripted.code, "scripted_error", "scripted status error", **headers
                    )
            job.status_calls += 1
            n = job.status_calls
            status, progress = self._advance(job, n)
            if b.unauthorized_from is not None and n >= b.unauthorized_from:
                return error_reply(
                    401, "unauthorized", "credential rejected", **{"WWW-Authenticate": "Bearer"}
                )
            if b.unknown_state_at is not None and n >= b.unknown_state_at:
                status = "mystery"
            mode = b.hostile_status if n >= b.hostile_from else "none"
            return self._status_reply(
                job, status, progress, mode, authorization=authorization, origin=origin
            )

    def _finished(self, job: Job, n: int) -> bool:
        b = job.behaviour
        if b.never_finish or b.run_past_expiry:
            return False
        if b.seconds_to_finish is not None:
            return time.monotonic() - job.created_mono >= b.seconds_to_finish
        return n >= b.polls_to_finish

    def _advance(self, job: Job, n: int) -> tuple[str, float | None]:
        """Move the job along for status call ``n``; return (status, progress)."""
        b = job.behaviour
        if job.final is None:
            if job.cancel_requested:
                if b.cancel == "honour":
                    job.final = "cancelled"
            elif self._finished(job, n):
                job.final = b.outcome
        if job.final is not None:
            status = job.final
            if status != "cancelled":
                job.last_progress = 100
        elif job.cancel_requested:
            status = "cancelling"
        elif n == 1:
            status = "queued"
        else:
            status = "running"
            job.last_progress = max(job.last_progress, self._running_progress(job, n))
        job.last_status = status
        self._notify(job, status)
        reports = b.progress and b.progress_shape != "eta_slips"
        return status, (job.last_progress if reports else None)

    @staticmethod
    def _running_progress(job: Job, n: int) -> float:
        b = job.behaviour
        if b.never_finish or b.run_past_expiry:
            fraction = 1 - 1 / (n + 1)
        elif b.seconds_to_finish:
            # Time-driven: as fine as Azure's percentComplete (a double), in the shape
            # the behaviour asks for (behaviour.PROGRESS_SHAPES).
            return time_driven_progress(
                b.progress_shape, (time.monotonic() - job.created_mono) / b.seconds_to_finish
            )
        else:
            fraction = n / b.polls_to_finish
        return max(0, min(99, int(100 * fraction)))

    def _status_reply(
        self,
        job: Job,
        status: str,
        progress: float | None,
        mode: str = "none",
        *,
        authorization: str | None = None,
        origin: str | None = None,
    ) -> Reply:
        b = job.behaviour
        expires = job.expires_at
        body: dict[str, Any] = {
            "id": job.id,
            "status": status,
            "progress": progress,
            # When the job started running (as OpenAI Batch's in_progress_at, Azure ARM's
            # startTime): progress counts from creation, so a running job started then.
            "started_at": None if status == "queued" else iso_utc(job.created_at),
            "expires_at": None if expires is None else iso_utc(expires),
            "result": None,
            "error": None,
        }
        if b.progress_shape == "eta_slips":
            body["estimated_completion_time"] = slipping_eta(job, status, time.monotonic())
        headers: dict[str, str] = {}
        if status == "succeeded" and not b.succeed_without_result:
            digest = job.result_sha256
            if b.result_bad_checksum:
                digest = hashlib.sha256(job.result_bytes + b"tampered").hexdigest()
            body["result"] = {
                "url": hostile.result_reference(job.id, b.hostile_result, b.foreign_origin),
                "sha256": digest,
                "record_count": b.result_items,
            } | self._presigned(job, origin)
            shape, total, failed = b.result_shape, b.result_items, b.result_failed_items
            lie = b.declared_failed_items
            body.update(conventions.status_fields(shape, job.id, total, failed, lie))
        elif status == "cancelled" and b.partial_on_cancel:
            # What it completed before the cancel, at the same place a result would be.
            body["result"] = {
                "url": f"/v1/jobs/{quote(job.id, safe='')}/result",
                "sha256": job.result_sha256,
                "record_count": b.result_items,
            }
        elif status == "failed":
            body["error"] = {"code": b.error_code, "message": b.error_message}
        if status not in FINAL_STATUSES:
            if b.has_poll_hint:
                body["poll_after_seconds"] = b.poll_hint
            retry = retry_after_value(b.retry_after, b.retry_after_date)
            if retry is not None:
                headers["Retry-After"] = retry
        if mode == "big_numbers":
            body.update(hostile.BIG_NUMBERS)
        elif mode == "echo_credential":
            fields, echoed = hostile.echo(authorization)
            body.update(fields)
            headers.update(echoed, Location=hostile.echo_location(job.id, authorization))
        reply = json_reply(200, body, headers)
        if mode == "deep_json":
            reply.body = hostile.dumps_with_deep(body, "detail", b.deep_json_depth)
        return transport_mode(reply, mode, b, body)

    def _presigned(self, job: Job, origin: str | None) -> dict[str, Any]:
        """A fresh presigned URL and its end, on every status read (caller holds the lock)."""
        b = job.behaviour
        if b.result_url_expires_in is None:
            return {}
        job.urls_issued += 1
        stale = b.result_url_expired_first and job.urls_issued == 1
        url, ends = downloads.presign(
            f"/v1/jobs/{quote(job.id, safe='')}/result",
            self._url_secret,
            b.result_url_expires_in,
            now=datetime.now(UTC),
            stale=stale,
        )
        return {"url": (origin or "") + url, "expires_at": iso_utc(ends)}

    def cancel(self, seq: int, job_id: str) -> Reply:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return error_reply(404, "not_found", f"no job {job_id}")
            if job.final is None and not job.cancel_requested:
                # A time-scripted job may have finished without anyone asking.
                b = job.behaviour
                if b.seconds_to_finish is not None and self._finished(job, job.status_calls):
                    job.final = b.outcome
            if job.final is not None:
                return json_reply(409, {"error": "job_terminal", "id": job.id, "status": job.final})
            job.cancel_requested = True
            if job.behaviour.cancel == "race":
                job.final = job.behaviour.outcome  # crossed its commit point first
            return json_reply(202, {"id": job.id, "status": "cancelling"})

    def cleanup(self, seq: int, job_id: str) -> Reply:
        """DELETE /v1/jobs/{id}/resources, as ARM RPC's "Delete Resource Asynchronously"
        answers it (RPC-Delete-V1-01): 204 when removed at once, 202 with a Location when
        removed in the background, 404 when nothing is there; "refuse" answers 409."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return error_reply(404, "not_found", f"no job {job_id}")
            job.cleanup_calls += 1
            if not job.left_resources:
                return error_reply(404, "ResourceNotFound", "nothing left to delete")
            mode = job.behaviour.leaves_resources
            if mode == "refuse":
                return error_reply(409, "resource_locked", "the resources are in use")
            if mode == "sync":
                job.resources_gone = True
                return Reply(status=204)
            job.resources_deleting = True
            where = f"/v1/jobs/{quote(job.id, safe='')}/resources"
            return json_reply(202, {"id": job.id, "status": "deleting"}, {"Location": where})

    def resources(self, seq: int, job_id: str) -> Reply:
        """GET /v1/jobs/{id}/resources: 200 while they exist (or are being deleted, for
        ``cleanup_checks`` reads), then 404 as ARM answers for a deleted resource."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not job.left_resources:
                return error_reply(404, "ResourceNotFound", "no such resources")
            if job.resources_deleting:
                job.resource_checks += 1
                if job.resource_checks > job.behaviour.cleanup_checks:
                    job.resources_gone = True
                    return error_reply(404, "ResourceNotFound", "deleted")
                return json_reply(200, {"id": job.id, "status": "deleting"})
            return json_reply(200, {"id": job.id, "status": "present"})

    def result(
        self, seq: int, job_id: str, *, path: str = "", query: dict[str, list[str]] | None = None
    ) -> Reply:
        with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return error_reply(404, "not_found", f"no job {job_id}")
            partial = job.final == "cancelled" and job.behaviour.partial_on_cancel
            if (job.final != "succeeded" and not partial) or job.behaviour.succeed_without_result:
                return error_reply(404, "result_not_available", "the job has no result (yet)")
            b = job.behaviour
            if b.result_url_expires_in is not None:
                now = datetime.now(UTC)
                refused = downloads.expired_or_forged(path, query or {}, self._url_secret, now)
                if refused is not None:
                    return refused
            if b.result_single_use:
                if job.link_used:
                    return downloads.link_used(job.id)
                job.link_used = True  # consumed by this GET, whether or not its body arrives
            if b.webhook is not None and b.webhook.out_of_order and not job.late_event_sent:
                # A "running" event from before the finish, delivered after the result.
                job.late_event_sent = True
                self.webhooks.late_event(b.webhook, job.id, "running", job.created_at)
            headers = {"Content-Type": conventions.content_type(b.result_shape)}
            # Digests of the result as produced; result_altered then changes it "in transit".
            headers.update(conventions.digest_headers(b.result_digest, job.result_bytes))
            body = conventions.altered(job.result_bytes) if b.result_altered else job.result_bytes
            reply = Reply(status=200, body=body, headers=headers)
            if job.result_stream is not None:
                reply.body, reply.stream, reply.length = b"", job.result_stream, job.result_length
            elif job.behaviour.hostile_result == "drip":
                reply.drip_seconds = job.behaviour.drip_interval_seconds
            reply.cut_after = b.result_cut_after_bytes
            return reply

    def error_file(self, seq: int, job_id: str | None) -> Reply:
        """The OpenAI Batch error file of a finished job with failed requests, else the
        Files API's 404."""
        with self._lock:
            job = self._jobs.get(job_id) if job_id is not None else None
            b = job.behaviour if job is not None else None
            if (
                job is None
                or b is None
                or job.final != "succeeded"
                or b.result_shape != "openai_jsonl"
                or not b.result_failed_items
            ):
                return downloads.no_such_file()
            content = conventions.openai_error_lines(b.result_items, b.result_failed_items)
        return Reply(status=200, body=content, headers={"Content-Type": "application/jsonl"})

    def lookup(self, seq: int, reference: str | None) -> Reply:
        if not reference:
            return error_reply(400, "reference_required", "use GET /v1/jobs?reference=KEY")
        with self._lock:
            job = self._by_key.get(reference)
            data = []
            if job is not None:
                data.append(
                    {
                        "id": job.id,
                        "status": job.public()["status"],
                        "created_at": iso_utc(job.created_at),
                    }
                )
        return json_reply(200, {"data": data})
