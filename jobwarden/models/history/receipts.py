"""Receipts: one operation's facts and whole event chain, signed, verifiable offline.

Pure (``cryptography`` computes, it does no I/O). ``build_receipt`` assembles the
document from what the shell read (the bound row facts, the events live or archived,
the create as it leaves) and ``signed`` signs it with an Ed25519 key; ``verify_receipt`` checks
a document with nothing but the public key: the signature over its canonical form,
every event hash and the head (``verification.verify_chain``), the row facts against
the digest the head event recorded, and every fact against the events and row it was
derived from. Each finding is a ``ReceiptProblem``; nothing here raises for what a
tampered document holds. The format is documented in docs/how-to/receipts.md.

The signature covers ``canonical`` (RFC 8785 with large numbers tagged, the chain's
own hash form) of the document without its ``signature`` member, so a receipt read
back from JSON verifies byte for byte whatever spacing or key order it was saved in.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from jobwarden.models.history.chain import EVENT_FIELDS, EventKind, StoredEvent
from jobwarden.models.history.hash_form import canonical, utc_iso
from jobwarden.models.history.row_facts import ROW_FACTS
from jobwarden.models.history.verification import verify_chain
from jobwarden.models.provider.outgoing import ShownRequest, request_digest

FORMAT: Final = "jobwarden-receipt/1"
ALGORITHM: Final = "Ed25519"
# Kinds whose event is what a provider (or a verified webhook) said: the observations.
OBSERVATION_KINDS: Final = frozenset(
    {
        EventKind.create_accepted.value,
        EventKind.create_replayed.value,
        EventKind.create_ambiguous.value,
        EventKind.create_refused.value,
        EventKind.create_rate_limited.value,
        EventKind.reconciled.value,
        EventKind.observed.value,
        EventKind.polled.value,
        EventKind.webhook_received.value,
        EventKind.cancel_confirmed.value,
        EventKind.cleanup_confirmed.value,
    }
)
APPROVAL_KINDS: Final = frozenset({EventKind.approved.value, EventKind.approval_recorded.value})
# The result's facts a receipt repeats from the event that recorded it.
RESULT_FACTS: Final = (
    "location",
    "sha256",
    "size_bytes",
    "record_count",
    "succeeded_items",
    "failed_item_count",
)
_DOCUMENT_KEYS: Final = frozenset(
    {"format", "operation_id", "issued_at", "facts", "row", "head", "events", "signature"}
)
_EVENT_KEYS: Final = frozenset({"seq", "prev_hash", "hash", "row_digest", "fields"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceiptProblem:
    where: str  # "signature", "event 5", "fact result.sha256", "document"
    problem: str

    def line(self) -> str:
        return f"{self.where}: {self.problem}"


def key_id(public_key: Ed25519PublicKey) -> str:
    """sha256 (hex) of the raw 32-byte public key: names the key a receipt was signed with."""
    raw = public_key.public_bytes(Encoding.Raw, PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


def row_json(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row's bound facts (``ROW_FACTS``) as JSON: times UTC ISO, states as text."""
    out: dict[str, Any] = {}
    for name, kind in ROW_FACTS.items():
        value = row[name]
        if value is None or kind == "json":
            out[name] = value
        elif kind == "time":
            out[name] = utc_iso(value)
        elif kind == "text":
            out[name] = str(value)
        else:
            out[name] = value
    return out


def _row_values(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row_json`` read back as ``row_digest`` takes it: times as datetimes again.

    Raises KeyError, TypeError or ValueError for a row a tampered document cut or garbled.
    """
    values = {name: row[name] for name in ROW_FACTS}
    for name, kind in ROW_FACTS.items():
        if kind == "time" and values[name] is not None:
            values[name] = datetime.fromisoformat(values[name])
    return values


def event_json(ev: StoredEvent) -> dict[str, Any]:
    return {
        "seq": ev.seq,
        "prev_hash": ev.prev_hash,
        "hash": ev.hash,
        "row_digest": ev.row_digest,
        "fields": dict(ev.fields),
    }


def shown_json(shown: ShownRequest) -> dict[str, Any]:
    """The create as it leaves, secrets redacted, with the digest an approval binds."""
    return {
        "method": shown.method,
        "url": shown.url,
        "headers": [[name, value] for name, value in shown.headers],
        "body": shown.body,
        "fingerprint": shown.fingerprint,
        "credential_from": shown.credential_from,
        "first_sent_header": shown.first_sent_header,
        "request_digest": shown.digest,
    }


def _excerpt(fields: Mapping[str, Any]) -> Mapping[str, Any]:
    excerpt = fields.get("excerpt")
    return excerpt if isinstance(excerpt, Mapping) else {}


def derived_facts(
    operation_id: str, events: Sequence[StoredEvent], row: Mapping[str, Any]
) -> dict[str, Any]:
    """Every fact a receipt states that its events and bound row determine.

    ``row`` is ``row_json``'s form. Approvals and observations are listed in chain
    order, each naming its event; the result is the last event recording stored
    bytes (as ``verification.check_result`` reads it), None when there is none.
    """
    approvals = []
    observations = []
    follow_ups = []
    result: dict[str, Any] | None = None
    for ev in events:
        fields = ev.fields
        kind = fields.get("kind")
        excerpt = _excerpt(fields)
        if kind in APPROVAL_KINDS:
            approvals.append(
                {
                    "seq": ev.seq,
                    "kind": kind,
                    "by": fields.get("actor"),
                    "at": fields.get("at"),
                    "fingerprint": excerpt.get("fingerprint"),
                    "request_digest": excerpt.get("request_digest"),
                    "approvers": excerpt.get("approvers"),
                }
            )
        if kind in OBSERVATION_KINDS:
            observations.append(
                {
                    "seq": ev.seq,
                    "kind": kind,
                    "at": fields.get("at"),
                    "http_status": fields.get("http_status"),
                    "remote_state": excerpt.get("remote_state"),
                    "job_id": excerpt.get("job_id"),
                }
            )
        if kind == EventKind.follow_up_started.value:
            follow_ups.append(
                {
                    "seq": ev.seq,
                    "operation_id": excerpt.get("follow_up"),
                    "kind": excerpt.get("follow_up_kind"),
                    "by": fields.get("actor"),
                    "amount": excerpt.get("amount"),
                }
            )
        if isinstance(excerpt.get("sha256"), str) and (
            kind == EventKind.result_collected.value or excerpt.get("kept") is True
        ):
            result = {"seq": ev.seq, **{name: excerpt.get(name) for name in RESULT_FACTS}}
    # A follow-up's link both ways (issue 40), only where there is one: a receipt of an
    # operation without follow-ups derives the same facts as before they existed.
    family: dict[str, Any] = {}
    if row.get("follows") is not None:
        family["follows"] = {"operation_id": row.get("follows"), "kind": row.get("follow_up_kind")}
    if follow_ups:
        family["follow_ups"] = follow_ups
    return family | {
        "operation_id": operation_id,
        "tenant": row.get("tenant"),
        "provider": row.get("provider"),
        "idempotency_key": row.get("idempotency_key"),
        "source_event_id": row.get("source_event_id"),
        "contract_digest": row.get("contract_digest"),
        "provider_token": row.get("provider_token"),
        "request_fingerprint": row.get("request_fingerprint"),
        "requested_by": row.get("requested_by"),
        "created_at": row.get("created_at"),
        "remote_job_id": row.get("remote_job_id"),
        "approvals": approvals,
        "observations": observations,
        "result": result,
        "final_state": row.get("state"),
    }


def build_receipt(
    *,
    operation_id: str,
    events: Sequence[StoredEvent],
    row: Mapping[str, Any],
    create_request: ShownRequest | None,
    issued_at: datetime,
) -> dict[str, Any]:
    """The receipt of an operation whose events and row the shell read together, unsigned.

    ``row``: the operations row's ``ROW_FACTS`` as read (datetimes, not text);
    ``events``: the whole chain in order (archived events first). The head is the
    last event: the shell reads row and events in one snapshot, so they agree.
    """
    bound = row_json(row)
    facts = derived_facts(operation_id, events, bound)
    facts["create_request"] = shown_json(create_request) if create_request else None
    return {
        "format": FORMAT,
        "operation_id": operation_id,
        "issued_at": utc_iso(issued_at),
        "facts": facts,
        "row": bound,
        "head": {
            "seq": events[-1].seq if events else 0,
            "hash": events[-1].hash if events else None,
        },
        "events": [event_json(ev) for ev in events],
    }


def signed(document: Mapping[str, Any], signing_key: Ed25519PrivateKey) -> dict[str, Any]:
    """``document`` with its ``signature``: Ed25519 over the canonical form of the rest."""
    unsigned = {k: v for k, v in document.items() if k != "signature"}
    signature = signing_key.sign(canonical(unsigned))
    return {
        **unsigned,
        "signature": {
            "algorithm": ALGORITHM,
            "key_id": key_id(signing_key.public_key()),
            "value": base64.b64encode(signature).decode("ascii"),
        },
    }


def _check_signature(
    document: Mapping[str, Any], public_key: Ed25519PublicKey
) -> list[ReceiptProblem]:
    signed = document.get("signature")
    if not isinstance(signed, Mapping) or not isinstance(signed.get("value"), str):
        return [ReceiptProblem(where="signature", problem="the receipt carries no signature")]
    if signed.get("algorithm") != ALGORITHM:
        return [ReceiptProblem(where="signature", problem=f"not an {ALGORITHM} signature")]
    unsigned = {k: v for k, v in document.items() if k != "signature"}
    try:
        value = base64.b64decode(signed["value"], validate=True)
        public_key.verify(value, canonical(unsigned))
    except (InvalidSignature, ValueError, TypeError, rfc8785.CanonicalizationError):
        named = signed.get("key_id")
        other = (
            f" (signed by key {named}, not {key_id(public_key)})"
            if isinstance(named, str) and named != key_id(public_key)
            else ""
        )
        return [
            ReceiptProblem(
                where="signature",
                problem=f"does not verify with this public key{other}: the receipt was "
                "altered after signing or signed by another key",
            )
        ]
    return []


def _events(document: Mapping[str, Any]) -> list[StoredEvent] | ReceiptProblem:
    """The document's events as the chain reads them, or the first one that is malformed."""
    raw = document.get("events")
    if not isinstance(raw, list):
        return ReceiptProblem(where="document", problem="events is not a list")
    out: list[StoredEvent] = []
    for n, item in enumerate(raw, 1):
        if (
            not isinstance(item, Mapping)
            or set(item) != _EVENT_KEYS
            or type(item["seq"]) is not int
            or not isinstance(item["prev_hash"], str)
            or not isinstance(item["hash"], str)
            or not (item["row_digest"] is None or isinstance(item["row_digest"], str))
            or not isinstance(item["fields"], Mapping)
            or set(item["fields"]) != set(EVENT_FIELDS)
        ):
            seq = item.get("seq") if isinstance(item, Mapping) else None
            return ReceiptProblem(
                where=f"event {seq}" if isinstance(seq, int) else f"events[{n - 1}]",
                problem="not an event: a field is missing or of the wrong type",
            )
        out.append(
            StoredEvent(
                seq=item["seq"],
                fields=item["fields"],
                prev_hash=item["prev_hash"],
                hash=item["hash"],
                row_digest=item["row_digest"],
            )
        )
    return out


def _differences(path: str, stated: Any, derived: Any) -> list[str]:
    """The paths below ``path`` where ``stated`` and ``derived`` differ, in document order."""
    if isinstance(stated, Mapping) and isinstance(derived, Mapping):
        out: list[str] = []
        for key in [*derived, *(k for k in stated if k not in derived)]:
            out += _differences(f"{path}.{key}", stated.get(key), derived.get(key))
        return out
    if isinstance(stated, list) and isinstance(derived, list) and len(stated) == len(derived):
        out = []
        for i, (s, d) in enumerate(zip(stated, derived, strict=True)):
            out += _differences(f"{path}[{i}]", s, d)
        return out
    same = type(stated) is type(derived) and stated == derived
    return [] if same else [path]


def _check_facts(
    operation_id: str,
    facts: Mapping[str, Any],
    events: Sequence[StoredEvent],
    row: Mapping[str, Any],
) -> list[ReceiptProblem]:
    derived = derived_facts(operation_id, events, row)
    stated = {k: v for k, v in facts.items() if k != "create_request"}
    problems = [
        ReceiptProblem(
            where=f"fact {path.removeprefix('.')}",
            problem="does not agree with the events and row it was derived from",
        )
        for path in _differences("", stated, derived)
    ]
    return problems + _check_create_request(facts.get("create_request"), derived)


def _check_create_request(shown: Any, derived: Mapping[str, Any]) -> list[ReceiptProblem]:
    """The create as sent: its own digest, the fingerprint, and the approval that bound it."""
    if shown is None:
        return []
    where = "fact create_request"
    try:
        digest = request_digest(
            ShownRequest(
                method=str(shown["method"]),
                url=str(shown["url"]),
                headers=tuple((str(n), str(v)) for n, v in shown["headers"]),
                body=shown["body"],
                fingerprint=str(shown["fingerprint"]),
                credential_from=shown["credential_from"],
                first_sent_header=shown["first_sent_header"],
            )
        )
    except (KeyError, TypeError, ValueError, rfc8785.CanonicalizationError):
        return [ReceiptProblem(where=where, problem="not a request: a field is missing")]
    problems = []
    if digest != shown.get("request_digest"):
        problems.append(ReceiptProblem(where=where, problem="its request_digest is not its own"))
    if shown.get("fingerprint") != derived["request_fingerprint"]:
        problems.append(
            ReceiptProblem(where=where, problem="its fingerprint is not the operation's")
        )
    bound = [a for a in derived["approvals"] if a["request_digest"] is not None]
    if bound and bound[-1]["request_digest"] != digest:
        problems.append(
            ReceiptProblem(
                where=where,
                problem=f"is not the request event {bound[-1]['seq']} approved "
                "(its digest differs)",
            )
        )
    return problems


def verify_receipt(
    document: Mapping[str, Any], public_key: Ed25519PublicKey
) -> list[ReceiptProblem]:
    """Every problem with a receipt, signature first, then events in chain order, then facts.

    [] when it verifies. Needs nothing but the document and the public key.
    """
    problems = _check_signature(document, public_key)
    if set(document) != _DOCUMENT_KEYS or document.get("format") != FORMAT:
        return [*problems, ReceiptProblem(where="document", problem=f"not a {FORMAT} document")]
    operation_id, facts, row, head = (
        document["operation_id"],
        document["facts"],
        document["row"],
        document["head"],
    )
    if not (
        isinstance(operation_id, str)
        and isinstance(facts, Mapping)
        and isinstance(row, Mapping)
        and isinstance(head, Mapping)
    ):
        return [*problems, ReceiptProblem(where="document", problem="a member has the wrong type")]
    events = _events(document)
    if isinstance(events, ReceiptProblem):
        return [*problems, events]
    try:
        values: dict[str, Any] | None = _row_values(row)
    except (KeyError, TypeError, ValueError):
        values = None
        problems.append(ReceiptProblem(where="row", problem="a bound row fact is missing"))
    raw_seq = head.get("seq")
    chain = verify_chain(
        operation_id,
        events,
        head_seq=raw_seq if isinstance(raw_seq, int) and not isinstance(raw_seq, bool) else -1,
        head_hash=str(head.get("hash")),
        row=values,
    )
    problems += [
        ReceiptProblem(where=f"event {p.seq}" if p.seq else "history", problem=p.problem)
        for p in chain
    ]
    problems += _check_facts(operation_id, facts, events, row)
    return problems
