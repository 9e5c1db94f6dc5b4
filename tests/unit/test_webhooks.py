"""Webhook verification (hmac and Standard Webhooks 1.0) and the wake-up decision, as tables."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from jobwarden.demo.sandbox.behaviour import BehaviourError, parse_behaviour
from jobwarden.models.actions import DelaySource
from jobwarden.models.contracts.contract import ChecksumEncoding, WebhookScheme, WebhookSpec
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError
from jobwarden.models.provider.webhooks import (
    POLLED,
    REFUSAL_STATUS,
    Delivery,
    Refusal,
    Refused,
    WebhookOutcome,
    WebhookSecretError,
    after_webhook,
    hmac_signature,
    verify_delivery,
)
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL, OperationState
from tests.unit.factories import NOW, operation

S = OperationState
VALID = Path(__file__).parent / "contracts" / "valid"
SECRET = "hmac-secret-for-tests"
BODY = json.dumps({"id": "evt_1", "job": {"id": "job_abc", "status": "succeeded"}}).encode()
TS = str(int(NOW.timestamp()))

HMAC_HEX = WebhookSpec(
    scheme=WebhookScheme.hmac,
    signature_header="X-Sig",
    timestamp_header="X-Ts",
    event_id_pointer="/id",
    job_id_pointer="/job/id",
    secret_env="WH",
    tolerance_seconds=300,
)
HMAC_B64 = replace(HMAC_HEX, signature_encoding=ChecksumEncoding.base64)
STANDARD = WebhookSpec(
    scheme=WebhookScheme.standard, job_id_pointer="/job/id", secret_env="WH", tolerance_seconds=300
)
# The signing test vector every Standard Webhooks reference library checks
# (libraries/go/webhook_test.go TestWebhookSign, and the JS, C# and Java tests).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
SPEC_TS = "1614265330"
SPEC_BODY = b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
STANDARD_SECRET = "whsec_" + base64.b64encode(b"k" * 32).decode()


def hmac_headers(
    spec: WebhookSpec = HMAC_HEX, *, secret: str = SECRET, ts: str = TS, body: bytes = BODY
) -> dict[str, str]:
    mac = hmac_signature(secret, ts, body)
    text = mac.hex() if spec.signature_encoding is ChecksumEncoding.hex else base64.b64encode(mac)
    return {"x-sig": text if isinstance(text, str) else text.decode(), "x-ts": ts}


def standard_headers(
    *, secret: str = STANDARD_SECRET, ts: str = TS, msg_id: str = "msg_1", body: bytes = BODY
) -> dict[str, str]:
    signed = Webhook(secret).sign(msg_id, NOW.fromtimestamp(int(ts), NOW.tzinfo), body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": ts, "webhook-signature": signed}


def without(headers: dict[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k != name}


STALE_TS = str(int(NOW.timestamp()) - 301)
FUTURE_TS = str(int(NOW.timestamp()) + 301)

VERIFY_TABLE = [
    # (case, spec, secret, headers, body, expected refusal or None for verified)
    ("hmac hex good", HMAC_HEX, SECRET, hmac_headers(), BODY, None),
    ("hmac base64 good", HMAC_B64, SECRET, hmac_headers(HMAC_B64), BODY, None),
    (
        "hmac at the tolerance edge",
        HMAC_HEX,
        SECRET,
        hmac_headers(ts=str(int(TS) - 300)),
        BODY,
        None,
    ),
    ("hmac wrong secret", HMAC_HEX, "another", hmac_headers(), BODY, Refusal.forged),
    ("hmac body changed", HMAC_HEX, SECRET, hmac_headers(), BODY + b" ", Refusal.forged),
    ("hmac hex sent as base64", HMAC_B64, SECRET, hmac_headers(), BODY, Refusal.forged),
    (
        "hmac timestamp swapped",
        HMAC_HEX,
        SECRET,
        {**hmac_headers(), "x-ts": str(int(TS) + 1)},
        BODY,
        Refusal.forged,
    ),
    ("hmac signature not hex", HMAC_HEX, SECRET, {"x-sig": "zz", "x-ts": TS}, BODY, Refusal.forged),
    ("hmac stale", HMAC_HEX, SECRET, hmac_headers(ts=STALE_TS), BODY, Refusal.stale),
    ("hmac from the future", HMAC_HEX, SECRET, hmac_headers(ts=FUTURE_TS), BODY, Refusal.stale),
    (
        "hmac forged and stale is forged",
        HMAC_HEX,
        "another",
        hmac_headers(ts=STALE_TS),
        BODY,
        Refusal.forged,
    ),
    (
        "hmac missing signature",
        HMAC_HEX,
        SECRET,
        without(hmac_headers(), "x-sig"),
        BODY,
        Refusal.unsigned,
    ),
    (
        "hmac missing timestamp",
        HMAC_HEX,
        SECRET,
        without(hmac_headers(), "x-ts"),
        BODY,
        Refusal.malformed,
    ),
    (
        "hmac timestamp not seconds",
        HMAC_HEX,
        SECRET,
        hmac_headers(ts="12.5"),
        BODY,
        Refusal.malformed,
    ),
    (
        "hmac body not an object",
        HMAC_HEX,
        SECRET,
        hmac_headers(body=b"[1]"),
        b"[1]",
        Refusal.malformed,
    ),
    (
        "hmac no event id",
        HMAC_HEX,
        SECRET,
        hmac_headers(body=b'{"job": {"id": "j"}}'),
        b'{"job": {"id": "j"}}',
        Refusal.malformed,
    ),
    (
        "hmac job id with a newline",
        HMAC_HEX,
        SECRET,
        hmac_headers(body=b'{"id": "e", "job": {"id": "j\\nx"}}'),
        b'{"id": "e", "job": {"id": "j\\nx"}}',
        Refusal.malformed,
    ),
    ("standard good", STANDARD, STANDARD_SECRET, standard_headers(), BODY, None),
    (
        "standard wrong secret",
        STANDARD,
        "whsec_" + base64.b64encode(b"x" * 32).decode(),
        standard_headers(),
        BODY,
        Refusal.forged,
    ),
    (
        "standard id swapped",
        STANDARD,
        STANDARD_SECRET,
        {**standard_headers(), "webhook-id": "msg_2"},
        BODY,
        Refusal.forged,
    ),
    (
        "standard rotation: one of two entries verifies",
        STANDARD,
        STANDARD_SECRET,
        {
            **standard_headers(),
            "webhook-signature": "v1,AAAA v1a,xyz garbage "
            + standard_headers()["webhook-signature"],
        },
        BODY,
        None,
    ),
    (
        "standard entry without a comma",
        STANDARD,
        STANDARD_SECRET,
        {**standard_headers(), "webhook-signature": "garbage"},
        BODY,
        Refusal.forged,
    ),
    (
        "standard stale",
        STANDARD,
        STANDARD_SECRET,
        standard_headers(ts=STALE_TS),
        BODY,
        Refusal.stale,
    ),
    (
        "standard missing signature",
        STANDARD,
        STANDARD_SECRET,
        without(standard_headers(), "webhook-signature"),
        BODY,
        Refusal.unsigned,
    ),
    (
        "standard missing id",
        STANDARD,
        STANDARD_SECRET,
        without(standard_headers(), "webhook-id"),
        BODY,
        Refusal.malformed,
    ),
    (
        "standard missing timestamp",
        STANDARD,
        STANDARD_SECRET,
        without(standard_headers(), "webhook-timestamp"),
        BODY,
        Refusal.malformed,
    ),
    (
        "standard timestamp with a leading zero",
        STANDARD,
        STANDARD_SECRET,
        {**standard_headers(), "webhook-timestamp": "0" + TS},
        BODY,
        Refusal.malformed,
    ),
]


@pytest.mark.parametrize(
    ("spec", "secret", "headers", "body", "expected"),
    [row[1:] for row in VERIFY_TABLE],
    ids=[row[0] for row in VERIFY_TABLE],
)
def test_a_delivery_is_verified_or_refused_with_its_reason(
    spec: WebhookSpec,
    secret: str,
    headers: dict[str, str],
    body: bytes,
    expected: Refusal | None,
) -> None:
    result = verify_delivery(spec, secret, headers, body, now=NOW)
    if expected is None:
        assert isinstance(result, Delivery), result
        assert result.remote_job_id == "job_abc"
    else:
        assert isinstance(result, Refused) and result.reason is expected, result
        assert secret not in result.detail


def test_forged_and_unsigned_are_401_and_stale_and_malformed_are_400() -> None:
    assert {r: REFUSAL_STATUS[r] for r in Refusal} == {
        Refusal.unsigned: 401,
        Refusal.forged: 401,
        Refusal.stale: 400,
        Refusal.malformed: 400,
    }


def test_the_hmac_event_id_comes_from_the_body_and_the_standard_one_from_webhook_id() -> None:
    hmac_delivery = verify_delivery(HMAC_HEX, SECRET, hmac_headers(), BODY, now=NOW)
    standard = verify_delivery(STANDARD, STANDARD_SECRET, standard_headers(), BODY, now=NOW)
    assert isinstance(hmac_delivery, Delivery) and hmac_delivery.event_id == "evt_1"
    assert isinstance(standard, Delivery) and standard.event_id == "msg_1"
    assert standard.signed_at == NOW.replace(microsecond=0)


def test_the_standard_webhooks_spec_test_vector_verifies() -> None:
    headers = {
        "webhook-id": SPEC_ID,
        "webhook-timestamp": SPEC_TS,
        "webhook-signature": SPEC_SIGNATURE,
    }
    spec = replace(STANDARD, job_id_pointer="/test")
    signed_at = NOW.fromtimestamp(int(SPEC_TS), NOW.tzinfo)
    result = verify_delivery(
        spec, SPEC_SECRET, headers, SPEC_BODY, now=signed_at + timedelta(seconds=5)
    )
    assert isinstance(result, Delivery), result
    assert (result.event_id, result.remote_job_id) == (SPEC_ID, "2432232314")
    tampered = {**headers, "webhook-signature": SPEC_SIGNATURE[:-4] + "AAA="}
    refused = verify_delivery(spec, SPEC_SECRET, tampered, SPEC_BODY, now=signed_at)
    assert isinstance(refused, Refused) and refused.reason is Refusal.forged


def test_a_secret_that_is_not_whsec_base64_is_a_configuration_error_that_never_shows_it() -> None:
    with pytest.raises(WebhookSecretError) as caught:
        verify_delivery(STANDARD, "whsec_", standard_headers(), BODY, now=NOW)
    assert "whsec_<base64>" in str(caught.value)


# --- the wake-up decision -------------------------------------------------------------

LATER = NOW + timedelta(seconds=60)


@pytest.mark.parametrize("state", list(S), ids=str)
def test_every_state_has_a_webhook_outcome_and_only_polled_states_are_woken(state: S) -> None:
    op = operation(state, next_poll_at=LATER)
    decision = after_webhook(op, NOW)
    if state in TERMINAL:
        expected = WebhookOutcome.finished
    elif state in AUTOMATION_STOPPED:
        expected = WebhookOutcome.automation_stopped
    elif state in POLLED:
        expected = WebhookOutcome.woke_poll
    else:
        expected = WebhookOutcome.not_polled
    assert decision.outcome is expected
    assert (decision.wake_at is not None) == (expected is WebhookOutcome.woke_poll)


WAKE_TABLE = [
    # (case, state, next_poll_at, poll_not_before, outcome, wake_at)
    ("backoff parked far ahead: now", S.observing, LATER, None, WebhookOutcome.woke_poll, NOW),
    ("no timer at all: now", S.observing, None, None, WebhookOutcome.woke_poll, NOW),
    (
        "Retry-After in force: at its end",
        S.observing,
        LATER,
        NOW + timedelta(seconds=20),
        WebhookOutcome.woke_poll,
        NOW + timedelta(seconds=20),
    ),
    (
        "Retry-After already over: now",
        S.observing,
        LATER,
        NOW - timedelta(seconds=5),
        WebhookOutcome.woke_poll,
        NOW,
    ),
    (
        "next poll is the Retry-After end: no change",
        S.observing,
        NOW + timedelta(seconds=20),
        NOW + timedelta(seconds=20),
        WebhookOutcome.poll_already_due,
        None,
    ),
    (
        "next poll already sooner: no change",
        S.observing,
        NOW + timedelta(seconds=1),
        NOW + timedelta(seconds=20),
        WebhookOutcome.poll_already_due,
        None,
    ),
    (
        "next poll overdue: no change",
        S.observing,
        NOW - timedelta(seconds=1),
        None,
        WebhookOutcome.poll_already_due,
        None,
    ),
    ("accepted, first poll ahead: now", S.accepted, LATER, None, WebhookOutcome.woke_poll, NOW),
    ("cancelling: confirm now", S.cancelling, LATER, None, WebhookOutcome.woke_poll, NOW),
    ("terminal: record only", S.succeeded, None, None, WebhookOutcome.finished, None),
    ("collecting: record only", S.result_collecting, NOW, None, WebhookOutcome.not_polled, None),
    ("escalated: record only", S.escalated, None, None, WebhookOutcome.automation_stopped, None),
]


@pytest.mark.parametrize(
    ("state", "next_poll_at", "not_before", "outcome", "wake_at"),
    [row[1:] for row in WAKE_TABLE],
    ids=[row[0] for row in WAKE_TABLE],
)
def test_a_webhook_wakes_the_poll_never_before_the_providers_retry_after(
    state: S,
    next_poll_at: datetime | None,
    not_before: datetime | None,
    outcome: WebhookOutcome,
    wake_at: datetime | None,
) -> None:
    op = operation(state, next_poll_at=next_poll_at, poll_not_before=not_before)
    decision = after_webhook(op, NOW)
    assert (decision.outcome, decision.wake_at) == (outcome, wake_at)
    if decision.wake_at is not None:
        assert not_before is None or decision.wake_at >= not_before
        assert next_poll_at is None or decision.wake_at < next_poll_at


INTERVAL_TABLE = [
    # (case, next_poll_at, poll_not_before, webhook_not_before, outcome, wake_at, source)
    (
        "a webhook woke a read moments ago: the next one waits out the interval",
        LATER,
        None,
        NOW + timedelta(seconds=8),
        WebhookOutcome.woke_poll,
        NOW + timedelta(seconds=8),
        DelaySource.webhook_interval,
    ),
    (
        "the interval is over: now",
        LATER,
        None,
        NOW - timedelta(seconds=1),
        WebhookOutcome.woke_poll,
        NOW,
        None,
    ),
    (
        "the woken read is still pending: no change",
        NOW + timedelta(seconds=8),
        None,
        NOW + timedelta(seconds=8),
        WebhookOutcome.poll_already_due,
        None,
        None,
    ),
    (
        "a Retry-After past the interval wins",
        LATER,
        NOW + timedelta(seconds=20),
        NOW + timedelta(seconds=8),
        WebhookOutcome.woke_poll,
        NOW + timedelta(seconds=20),
        DelaySource.provider_retry_after,
    ),
    (
        "the interval past a Retry-After wins",
        LATER,
        NOW + timedelta(seconds=3),
        NOW + timedelta(seconds=8),
        WebhookOutcome.woke_poll,
        NOW + timedelta(seconds=8),
        DelaySource.webhook_interval,
    ),
]


@pytest.mark.parametrize(
    ("next_poll_at", "not_before", "webhook_not_before", "outcome", "wake_at", "source"),
    [row[1:] for row in INTERVAL_TABLE],
    ids=[row[0] for row in INTERVAL_TABLE],
)
def test_a_webhook_wakes_no_status_read_sooner_than_its_interval_after_the_last_it_woke(
    next_poll_at: datetime,
    not_before: datetime | None,
    webhook_not_before: datetime,
    outcome: WebhookOutcome,
    wake_at: datetime | None,
    source: DelaySource | None,
) -> None:
    op = operation(S.observing, next_poll_at=next_poll_at, poll_not_before=not_before)
    decision = after_webhook(op, NOW, webhook_not_before=webhook_not_before)
    assert (decision.outcome, decision.wake_at, decision.delay_source) == (
        outcome,
        wake_at,
        source,
    )


# --- the contract's [webhook] table ------------------------------------------------------


def test_a_contract_may_name_the_standard_webhooks_scheme_without_headers() -> None:
    c = load_contract(VALID / "webhook_standard.toml")
    assert c.webhook is not None
    assert c.webhook.scheme is WebhookScheme.standard
    assert (c.webhook.signature_header, c.webhook.event_id_pointer) == (None, None)
    assert c.webhook.tolerance_seconds == 60


def test_an_hmac_contract_may_sign_in_base64() -> None:
    c = load_contract(VALID / "webhook_hmac_base64.toml")
    assert c.webhook is not None
    assert c.webhook.scheme is WebhookScheme.hmac
    assert c.webhook.signature_encoding is ChecksumEncoding.base64


def test_an_hmac_contract_without_a_scheme_signs_in_hex() -> None:
    c = load_contract(VALID / "webhook_secret_file.toml")
    assert c.webhook is not None
    assert (c.webhook.scheme, c.webhook.signature_encoding) == (
        WebhookScheme.hmac,
        ChecksumEncoding.hex,
    )


def _broken(tmp_path: Path, source: str, old: str, new: str) -> ContractError:
    text = (VALID / f"{source}.toml").read_text()
    assert old in text
    path = tmp_path / f"{source}.toml"
    path.write_text(text.replace(old, new))
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    return caught.value


def test_a_standard_contract_naming_a_header_is_refused_naming_the_field(tmp_path: Path) -> None:
    error = _broken(
        tmp_path,
        "webhook_standard",
        'scheme = "standard"',
        'scheme = "standard"\nsignature_header = "X"',
    )
    assert error.field == "webhook.signature_header"
    assert "scheme = 'hmac'" in error.problem


def test_an_unknown_scheme_is_refused_naming_the_choices(tmp_path: Path) -> None:
    error = _broken(tmp_path, "webhook_standard", 'scheme = "standard"', 'scheme = "svix"')
    assert error.field == "webhook.scheme"
    assert "hmac, standard" in error.problem


def test_an_hmac_contract_without_its_timestamp_header_is_refused(tmp_path: Path) -> None:
    error = _broken(
        tmp_path, "webhook_hmac_base64", 'timestamp_header = "X-Sandbox-Timestamp"\n', ""
    )
    assert (error.field, error.problem) == ("webhook.timestamp_header", "required")


def test_an_unknown_signature_encoding_is_refused(tmp_path: Path) -> None:
    error = _broken(
        tmp_path,
        "webhook_hmac_base64",
        'signature_encoding = "base64"',
        'signature_encoding = "b32"',
    )
    assert error.field == "webhook.signature_encoding"


# --- the sandbox's webhook option ----------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "field"),
    [
        ({"url": "ftp://127.0.0.1/x"}, "behaviour.webhook.url"),
        ({"url": "http://127.0.0.1/x", "scheme": "svix"}, "behaviour.webhook.scheme"),
        ({"url": "http://127.0.0.1/x", "forged": "yes"}, "behaviour.webhook.forged"),
        ({"url": "http://127.0.0.1/x", "retries": 3}, "behaviour.webhook: unknown keys"),
        ("http://127.0.0.1/x", "behaviour.webhook must be an object"),
    ],
)
def test_a_malformed_sandbox_webhook_option_is_refused_naming_the_field(
    option: object, field: str
) -> None:
    with pytest.raises(BehaviourError) as caught:
        parse_behaviour({"webhook": option})
    assert field in str(caught.value)


def test_the_sandbox_webhook_option_defaults_to_one_genuine_standard_delivery() -> None:
    parsed = parse_behaviour({"webhook": {"url": "http://127.0.0.1:1/v1/webhooks/x"}}).webhook
    assert parsed is not None
    assert (parsed.scheme, parsed.duplicate, parsed.forged, parsed.stale) == (
        "standard",
        False,
        False,
        False,
    )
