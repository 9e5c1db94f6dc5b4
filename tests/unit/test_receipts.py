"""Receipts (models/history/receipts.py): an honest one verifies, every tamper is named.

A synthetic chain written the way the store writes one (``chain`` with the row digest
on the last event), so every test is pure and fast; tests/integration/test_receipts.py
does the same against a real operation and an offline process.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ec import SECP256R1
from cryptography.hazmat.primitives.asymmetric.ec import generate_private_key as ec_key
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import SecretStr

from jobwarden.config.settings import Settings
from jobwarden.models.errors import SettingsError
from jobwarden.models.history.chain import (
    EVENT_FIELDS,
    GENESIS_HASH,
    EventDraft,
    EventKind,
    chain,
)
from jobwarden.models.history.receipts import (
    FORMAT,
    build_receipt,
    key_id,
    signed,
    verify_receipt,
)
from jobwarden.models.history.row_facts import ROW_FACTS, row_digest
from jobwarden.models.provider.outgoing import ShownRequest
from jobwarden.tasks.receipts import signing_key

OP = "6bb3dc4c-a1d5-4734-b9a0-361820573e51"
T0 = datetime(2026, 12, 6, 23, 0, tzinfo=UTC)
SIGNER = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
SHA = "99cb01c256e3ed234e5162a4588dd80c6dd3647361aa270ab635261e4b227746"
FINGERPRINT = "1" * 64
SHOWN = ShownRequest(
    method="POST",
    url="https://provider.example/v1/jobs",
    headers=(("authorization", "Bearer [redacted]"), ("idempotency-key", f"jw-{OP}")),
    body='{"kind":"export"}',
    fingerprint=FINGERPRINT,
    credential_from="env:PROVIDER_TOKEN",
)
ROW: dict[str, Any] = {name: None for name in ROW_FACTS} | {
    "tenant": "acme",
    "provider": "sandbox",
    "idempotency_key": "order-42",
    "provider_token": f"jw-{OP}",
    "request_fingerprint": FINGERPRINT,
    "method": "POST",
    "route": "/providers/sandbox/operations",
    "command": {"kind": "export", "big": 2**64},
    "trace_id": "7c638d648255cd325f60d1634679a911",
    "requested_by": "alice",
    "authorized_by": "bob",
    "created_at": T0,
    "state": "succeeded",
    "remote_job_id": "job_1",
    "create_deadline": T0 + timedelta(minutes=5),
    "result_deadline": T0 + timedelta(hours=1),
    "create_attempts": 1,
    "status_requests_used": 1,
    "max_status_requests": 200,
    "transport_failures_used": 0,
    "max_transport_failures": 10,
    "extensions_used": 0,
    "step_failures": 0,
    "result_fetch_attempts": 1,
    "approved_request_digest": SHOWN.digest,
    "contract_digest": "c" * 64,
}


def _draft(kind: EventKind, minute: int, **extra: Any) -> EventDraft:
    return EventDraft(
        kind=kind, actor=extra.pop("actor", "worker:w"), at=T0 + timedelta(minutes=minute), **extra
    )


DRAFTS = [
    _draft(
        EventKind.intent_recorded,
        0,
        actor="submitter:alice",
        to_state="awaiting_approval",
        excerpt={"fingerprint": FINGERPRINT, "idempotency_key": "order-42"},
    ),
    _draft(
        EventKind.approved,
        1,
        actor="human:bob",
        from_state="awaiting_approval",
        to_state="create_pending",
        excerpt={"fingerprint": FINGERPRINT, "request_digest": SHOWN.digest},
    ),
    _draft(EventKind.create_sent, 2, excerpt={"attempt": 1}),
    _draft(
        EventKind.create_accepted,
        3,
        http_status=202,
        to_state="accepted",
        excerpt={"job_id": "job_1", "body": {"id": 2**64, "size": 1e300, "tiny": 1.5e-300}},
    ),
    _draft(
        EventKind.observed,
        4,
        http_status=200,
        to_state="observing",
        excerpt={"remote_state": "succeeded"},
    ),
    _draft(
        EventKind.result_collected,
        5,
        http_status=200,
        to_state="succeeded",
        excerpt={
            "sha256": SHA,
            "size_bytes": 553,
            "record_count": 10,
            "succeeded_items": 10,
            "failed_item_count": 0,
            "location": "file:///results/x",
        },
    ),
]
EVENTS = [
    ev.stored()
    for ev in chain(OP, DRAFTS, last_seq=0, last_hash=GENESIS_HASH, row_digest=row_digest(ROW))
]


def _receipt() -> dict[str, Any]:
    document = build_receipt(
        operation_id=OP, events=EVENTS, row=ROW, create_request=SHOWN, issued_at=T0
    )
    # Read back from its file, as a verifier reads it.
    read_back: dict[str, Any] = json.loads(json.dumps(signed(document, SIGNER)))
    return read_back


def _lines(document: dict[str, Any], key: Ed25519PrivateKey = SIGNER) -> list[str]:
    return [p.line() for p in verify_receipt(document, key.public_key())]


def test_an_honest_receipt_verifies_whatever_spacing_and_key_order_it_was_saved_in() -> None:
    document = _receipt()
    assert document["format"] == FORMAT
    assert _lines(document) == []
    respaced = json.loads(json.dumps(dict(reversed(document.items())), indent=3))
    assert _lines(respaced) == []
    assert document["signature"]["key_id"] == key_id(SIGNER.public_key())


def test_the_facts_say_who_approved_what_the_provider_answered_and_the_result() -> None:
    facts = _receipt()["facts"]
    assert facts["approvals"] == [
        {
            "seq": 2,
            "kind": "approved",
            "by": "human:bob",
            "at": "2026-12-06T23:01:00.000000+00:00",
            "fingerprint": FINGERPRINT,
            "request_digest": SHOWN.digest,
            "approvers": None,
        }
    ]
    assert [(o["seq"], o["http_status"], o["remote_state"]) for o in facts["observations"]] == [
        (4, 202, None),
        (5, 200, "succeeded"),
    ]
    assert facts["result"] == {
        "seq": 6,
        "location": "file:///results/x",
        "sha256": SHA,
        "size_bytes": 553,
        "record_count": 10,
        "succeeded_items": 10,
        "failed_item_count": 0,
    }
    assert (facts["provider_token"], facts["final_state"]) == (f"jw-{OP}", "succeeded")
    assert facts["create_request"]["request_digest"] == SHOWN.digest


def _set(path: list[str | int], value: Any) -> Callable[[dict[str, Any]], None]:
    def tamper(doc: dict[str, Any]) -> None:
        target: Any = doc
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return tamper


def _remove(index: int) -> Callable[[dict[str, Any]], None]:
    return lambda doc: doc["events"].pop(index)


def _swap(index: int) -> Callable[[dict[str, Any]], None]:
    def tamper(doc: dict[str, Any]) -> None:
        events = doc["events"]
        events[index], events[index + 1] = events[index + 1], events[index]

    return tamper


# (what is tampered, how, the first line after the signature's)
TAMPERS: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    (
        "an edited event",
        _set(["events", 4, "fields", "http_status"], 500),
        "event 5: hash does not",
    ),
    ("an edited actor", _set(["events", 1, "fields", "actor"], "human:mallory"), "event 2: hash"),
    ("a removed event", _remove(2), "event 4: expected seq 3"),
    ("the first removed", _remove(0), "event 2: expected seq 1"),
    ("a reordered pair", _swap(2), "event 4: expected seq 3"),
    ("the tail cut", _remove(5), "event 6: chain head does not match"),
    (
        "an edited result digest",
        _set(["facts", "result", "sha256"], "0" * 64),
        "fact result.sha256",
    ),
    (
        "an edited approver",
        _set(["facts", "approvals", 0, "by"], "human:eve"),
        "fact approvals[0].by",
    ),
    ("an edited tenant fact", _set(["facts", "tenant"], "other"), "fact tenant"),
    ("an edited bound row", _set(["row", "tenant"], "other"), "event 6: operations row differs"),
    ("an edited head", _set(["head", "hash"], "f" * 64), "event 6: chain head does not match"),
    (
        "a create request another than approved",
        _set(["facts", "create_request", "url"], "https://elsewhere.example/v1/jobs"),
        "fact create_request: its request_digest is not its own",
    ),
]


@pytest.mark.parametrize(("tamper", "named"), [t[1:] for t in TAMPERS], ids=[t[0] for t in TAMPERS])
def test_each_tamper_is_detected_and_named_after_the_broken_signature(
    tamper: Callable[[dict[str, Any]], None], named: str
) -> None:
    document = _receipt()
    tamper(document)
    lines = _lines(document)
    assert lines[0].startswith("signature: does not verify with this public key"), lines
    assert lines[1].startswith(named), lines


@pytest.mark.parametrize(("tamper", "named"), [t[1:] for t in TAMPERS], ids=[t[0] for t in TAMPERS])
def test_a_tamper_re_signed_with_another_key_is_still_named(
    tamper: Callable[[dict[str, Any]], None], named: str
) -> None:
    document = _receipt()
    tamper(document)
    lines = _lines(signed(document, OTHER), OTHER)
    assert lines and lines[0].startswith(named), lines


def test_a_signature_of_another_key_is_the_one_problem_named_with_both_key_ids() -> None:
    lines = _lines(signed(_receipt(), OTHER))
    assert lines == [
        f"signature: does not verify with this public key (signed by key "
        f"{key_id(OTHER.public_key())}, not {key_id(SIGNER.public_key())}): the receipt was "
        "altered after signing or signed by another key"
    ]


def test_a_create_request_that_is_not_the_approved_one_is_named_even_when_self_consistent() -> None:
    other = ShownRequest(
        **{
            **{f: getattr(SHOWN, f) for f in ("method", "headers", "body")},
            "url": "https://elsewhere.example/v1/jobs",
            "fingerprint": FINGERPRINT,
            "credential_from": SHOWN.credential_from,
        }
    )
    document = build_receipt(
        operation_id=OP, events=EVENTS, row=ROW, create_request=other, issued_at=T0
    )
    lines = _lines(signed(document, SIGNER))
    assert lines == [
        "fact create_request: is not the request event 2 approved (its digest differs)"
    ]


@pytest.mark.parametrize(
    "garbage",
    [
        {},
        {"format": FORMAT},
        {
            **{
                k: None
                for k in (
                    "format",
                    "operation_id",
                    "issued_at",
                    "facts",
                    "row",
                    "head",
                    "events",
                    "signature",
                )
            }
        },
    ],
)
def test_a_document_that_is_not_a_receipt_is_refused_without_raising(
    garbage: dict[str, Any],
) -> None:
    lines = _lines(garbage)
    assert lines and lines[-1].startswith("document: ")


def test_a_malformed_event_is_named_not_raised() -> None:
    document = _receipt()
    del document["events"][3]["fields"]["kind"]
    assert _lines(document)[1] == "event 4: not an event: a field is missing or of the wrong type"


@settings(max_examples=150, deadline=None)
@given(
    index=st.integers(min_value=0, max_value=len(EVENTS) - 1),
    field=st.sampled_from(EVENT_FIELDS),
    value=st.one_of(st.text(max_size=8), st.integers(), st.none(), st.floats(allow_nan=False)),
)
def test_any_edit_of_any_event_field_is_named_at_that_event(
    index: int, field: str, value: Any
) -> None:
    document = _receipt()
    fields = document["events"][index]["fields"]
    if fields[field] == value and type(fields[field]) is type(value):
        return  # no edit at all
    fields[field] = value
    lines = _lines(signed(document, SIGNER))  # re-signed by an insider with the key
    assert f"event {index + 1}: hash does not match contents" in lines, lines


@settings(max_examples=100, deadline=None)
@given(
    operation=st.sampled_from(["remove", "swap", "duplicate"]),
    index=st.integers(min_value=0, max_value=len(EVENTS) - 1),
)
def test_any_removed_reordered_or_repeated_event_breaks_the_chain(
    operation: str, index: int
) -> None:
    document = _receipt()
    events = document["events"]
    if operation == "remove":
        events.pop(index)
    elif operation == "swap":
        if index == len(events) - 1:
            index -= 1
        events[index], events[index + 1] = events[index + 1], events[index]
    else:
        events.insert(index, copy.deepcopy(events[index]))
    lines = _lines(signed(document, SIGNER))
    assert any(line.startswith("event ") for line in lines), lines


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _leaves(v, (*path, i))]
    return [path]


FACT_LEAVES = [p for p in _leaves(_receipt()["facts"]) if p[0] != "create_request"]


@settings(max_examples=150, deadline=None)
@given(path=st.sampled_from(FACT_LEAVES), value=st.one_of(st.text(max_size=8), st.integers()))
def test_any_edited_fact_is_named_by_its_path(path: tuple[str | int, ...], value: Any) -> None:
    document = _receipt()
    target: Any = document["facts"]
    for step in path[:-1]:
        target = target[step]
    if target[path[-1]] == value and type(target[path[-1]]) is type(value):
        return
    target[path[-1]] = value
    shown = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).removeprefix(".")
    lines = _lines(signed(document, SIGNER))
    assert lines == [f"fact {shown}: does not agree with the events and row it was derived from"]


def _settings(key: str | None) -> Settings:
    return Settings(receipt_signing_key=SecretStr(key) if key is not None else None)


def test_the_signing_key_is_refused_in_one_line_naming_the_variable_never_quoting_it() -> None:
    ec = ec_key(SECP256R1()).private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    garbage = "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1tYXRlcmlhbA==\n-----END PRIVATE KEY-----"
    refusals = []
    for key in (None, garbage, ec.decode()):
        with pytest.raises(SettingsError) as refused:
            signing_key(_settings(key))
        refusals.append(str(refused.value))
        assert key is None or "c2VjcmV0" not in str(refused.value)
    assert refusals == [
        "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE is not set: receipts need an Ed25519 signing key",
        "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE: not a PEM private key",
        "JOBWARDEN_RECEIPT_SIGNING_KEY_FILE: not an Ed25519 key",
    ]
    pem = SIGNER.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    loaded = signing_key(_settings(pem))
    assert key_id(loaded.public_key()) == key_id(SIGNER.public_key())
