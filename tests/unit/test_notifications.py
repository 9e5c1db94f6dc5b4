"""Notifications' pure parts: who is told when, what they are sent, when it is retried,
and a targets file whose every mistake names the file and the field."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from jobwarden.models.errors import NotificationConfigError
from jobwarden.models.humans.notification_targets import parse_targets
from jobwarden.models.humans.notifications import (
    MAX_DETAIL_CHARS,
    NotificationKind,
    RetryPolicy,
    Subject,
    after_failure,
    bounded_error,
    event_id,
    kind_for,
    notice,
    paused_notice,
    retry_delay,
)
from jobwarden.models.states import OperationState as S

T0 = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "kind"),
    [
        (S.escalated, NotificationKind.escalated),
        (S.result_timed_out, NotificationKind.escalated),
        (S.cancellation_unconfirmed, NotificationKind.escalated),
        (S.awaiting_approval, NotificationKind.awaiting_approval),
        (S.observing, None),
        (S.succeeded, None),
        (S.approval_expired, None),
    ],
)
def test_only_states_that_need_a_human_are_notified(
    state: S, kind: NotificationKind | None
) -> None:
    assert kind_for(state) is kind


def test_the_event_id_is_the_kind_the_operation_and_the_event_and_has_no_full_stop() -> None:
    op = uuid.UUID(int=7)
    made = event_id(NotificationKind.escalated, str(op), 12)
    assert made == f"escalated:{op}:12"
    # Standard Webhooks signs "{id}.{timestamp}.{body}": an id with a dot is refused.
    assert "." not in made


def _subject(**overrides: object) -> Subject:
    values: dict[str, object] = dict(
        operation_id=str(uuid.UUID(int=1)),
        tenant="billing",
        provider="sandbox",
        state=S.escalated,
        trace_id="a" * 32,
        request_fingerprint="f" * 64,
        reason="rate_limited",
        detail="429 six times",
    )
    values.update(overrides)
    return Subject(**values)  # type: ignore[arg-type]


def test_an_escalation_payload_names_the_operation_reason_trace_and_console_page() -> None:
    n = notice(NotificationKind.escalated, _subject(), mark=5, at=T0)
    assert n.payload == {
        "type": "operation.escalated",
        "timestamp": T0.isoformat(),
        "data": {
            "operation_id": str(uuid.UUID(int=1)),
            "tenant": "billing",
            "provider": "sandbox",
            "state": "escalated",
            "reason": "rate_limited",
            "detail": "429 six times",
            "trace_id": "a" * 32,
            "console_path": f"/console/operations/{uuid.UUID(int=1)}",
        },
    }


def test_a_long_detail_is_bounded_and_an_approval_payload_carries_its_window_end() -> None:
    ends = T0 + timedelta(hours=1)
    n = notice(
        NotificationKind.awaiting_approval,
        _subject(state=S.awaiting_approval, detail="x" * 5000, next_poll_at=ends),
        mark=1,
        at=T0,
    )
    data = n.payload["data"]
    assert len(data["detail"]) == MAX_DETAIL_CHARS
    assert data["reason"] is None
    assert data["approval_expires_at"] == ends.isoformat()
    assert data["request_fingerprint"] == "f" * 64


# -- retries: exponential, jittered, bounded --------------------------------------------


@pytest.mark.parametrize(
    ("attempts", "jitter", "seconds"),
    [
        (1, 1.0, 5),
        (2, 1.0, 15),
        (3, 1.0, 45),
        (4, 1.0, 135),
        (1, 0.0, 4),  # the floor: never sooner than 80 % of the schedule
        (2, 0.5, 13.5),
        (9, 1.0, 6 * 3600),  # 5 * 3^8 s is past the cap: six hours
        (12, 0.0, 0.8 * 6 * 3600),
    ],
)
def test_the_retry_delay_grows_threefold_from_five_seconds_to_a_six_hour_cap(
    attempts: int, jitter: float, seconds: float
) -> None:
    assert retry_delay(attempts, jitter).total_seconds() == pytest.approx(seconds)


def test_a_failure_is_retried_until_the_attempts_run_out() -> None:
    policy = RetryPolicy(max_attempts=3)
    assert after_failure(attempts=2, created_at=T0, now=T0, jitter=1, policy=policy) == T0 + (
        timedelta(seconds=15)
    )
    assert after_failure(attempts=3, created_at=T0, now=T0, jitter=1, policy=policy) is None


def test_a_failure_whose_next_attempt_would_be_too_old_gives_up() -> None:
    policy = RetryPolicy(max_age=timedelta(minutes=1))
    now = T0 + timedelta(seconds=50)
    assert after_failure(attempts=2, created_at=T0, now=now, jitter=1, policy=policy) is None


def test_a_stored_error_is_one_bounded_line() -> None:
    assert bounded_error("HTTP\n 500") == "HTTP 500"
    assert len(bounded_error("x" * 1000)) == 300


def test_attempts_count_from_one() -> None:
    with pytest.raises(ValueError, match="from 1"):
        retry_delay(0, 1.0)


# -- the targets file ---------------------------------------------------------------------


def test_a_valid_file_gives_each_tenant_its_targets() -> None:
    targets = parse_targets(
        """
        [tenants.billing]
        url = "https://hooks.example.com/jw"
        secret_env = "BILLING_WEBHOOK_SECRET"
        apprise_urls_env = "BILLING_APPRISE_URLS"

        [tenants.ops]
        apprise_urls_env = "OPS_APPRISE_URLS"
        """,
        file="notify.toml",
    )
    billing = targets.of("billing")
    assert billing is not None and billing.url == "https://hooks.example.com/jw"
    assert billing.secret_env == "BILLING_WEBHOOK_SECRET"
    ops = targets.of("ops")
    assert ops is not None and ops.url is None and ops.apprise_urls_env == "OPS_APPRISE_URLS"
    assert targets.of("nobody") is None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("[tenants.b\nurl=", "notify.toml: not valid TOML"),
        ("[tenant.b]\nurl = 'https://h/x'", "notify.toml: tenant: unknown table"),
        ("[tenants.b]\nurl = 'https://h/x'\nsecret = 'x'", "notify.toml: tenants.b.secret:"),
        ("[tenants.b]\nurl = 'ftp://h/x'\nsecret_env = 'S'", "tenants.b.url: must be an absolute"),
        ("[tenants.b]\nurl = 'https://u:p@h/x'\nsecret_env = 'S'", "tenants.b.url: must not"),
        ("[tenants.b]\nurl = 'https://h/x'", "tenants.b.secret_env: give exactly one"),
        (
            "[tenants.b]\nurl = 'https://h/x'\nsecret_env = 'S'\nsecret_file = '/s'",
            "tenants.b.secret_env: give exactly one",
        ),
        ("[tenants.b]\nsecret_env = 'S'", "tenants.b.url: a signing secret needs a url"),
        ("[tenants.b]\nurl = 7\nsecret_env = 'S'", "tenants.b.url: must be a non-empty string"),
        ("[tenants.b]", "tenants.b: names neither url nor apprise_urls_env"),
    ],
)
def test_every_mistake_in_the_targets_file_names_the_file_and_the_field(
    text: str, names: str
) -> None:
    with pytest.raises(NotificationConfigError) as caught:
        parse_targets(text, file="notify.toml")
    assert names in str(caught.value)
    assert str(caught.value).startswith("notify.toml")


def test_a_pause_notice_id_fits_its_column_and_tells_every_tenant_name_apart() -> None:
    # The id is the receiver's dedup key and a 200-character column: a tenant name of 200
    # characters fits, and names that differ only by a full stop are two notices, not one.
    pause = str(uuid.UUID(int=7))

    def notice_id(tenant: str) -> str:
        return paused_notice(
            pause_id=pause,
            provider="sandbox",
            tenant=tenant,
            operation_id=None,
            reason="provider review",
            paused_by="token:alice",
            at=datetime(2026, 1, 1, tzinfo=UTC),
        ).event_id

    longest = notice_id("t" * 200)
    assert len(longest) <= 200 and "." not in longest
    assert notice_id("acme.eu") != notice_id("acme_eu")
    assert notice_id("acme") == notice_id("acme")
