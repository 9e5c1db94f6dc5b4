"""The no-worker verdict (models/intake/attendance.py): a pure function of the newest
heartbeat, the server's clock and the silence threshold (issue 36, point 5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobwarden.config.settings import load_settings
from jobwarden.models.errors import SettingsError
from jobwarden.models.intake.attendance import NO_WORKER, no_worker_warning, unattended

NOW = datetime(2026, 12, 6, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("last_beat", "expected"),
    [
        (None, True),  # no worker ever stamped the queue (or not within the retention)
        (NOW - timedelta(seconds=31), True),  # older than the threshold
        (NOW - timedelta(seconds=30), False),  # exactly at it: still attended
        (NOW - timedelta(seconds=2), False),
        (NOW + timedelta(seconds=1), False),  # stamped a moment after the read's clock
    ],
)
def test_a_queue_is_unattended_only_past_the_silence_threshold(
    last_beat: datetime | None, expected: bool
) -> None:
    assert unattended(last_beat, NOW, 30.0) is expected


def test_the_warning_names_the_queue_when_it_was_last_seen_and_how_to_start_a_worker() -> None:
    last = NOW - timedelta(minutes=5)
    warning = no_worker_warning("billing", last, NOW, 30.0)
    assert warning is not None and warning.code == NO_WORKER
    assert warning.as_dict() == {
        "code": "no_worker",
        "queue": "billing",
        "last_seen": "2026-12-06T11:55:00+00:00",
        "detail": "no worker has consumed queue 'billing' in the last 30 s (last seen "
        "2026-12-06T11:55:00+00:00); the operation waits until one starts: "
        "celery -A jobwarden.config.celery_app worker -Q billing",
    }
    never = no_worker_warning("billing", None, NOW, 30.0)
    assert never is not None and "(none seen)" in never.detail
    assert never.as_dict()["last_seen"] is None


def test_no_warning_while_a_worker_beats() -> None:
    assert no_worker_warning("billing", NOW - timedelta(seconds=3), NOW, 30.0) is None


def test_a_silence_threshold_not_longer_than_the_heartbeat_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBWARDEN_WORKER_HEARTBEAT_SECONDS", "10")
    monkeypatch.setenv("JOBWARDEN_WORKER_SILENCE_SECONDS", "10")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert "JOBWARDEN_WORKER_SILENCE_SECONDS" in str(refused.value)
    assert "JOBWARDEN_WORKER_HEARTBEAT_SECONDS" in str(refused.value)
