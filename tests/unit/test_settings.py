"""Settings: defaults that work locally, one clear error naming a bad variable."""

from __future__ import annotations

import pytest

from jobwarden.config.settings import load_settings
from jobwarden.models.errors import SettingsError


@pytest.fixture(autouse=True)
def _scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("JOBWARDEN_"):
            monkeypatch.delenv(name)


def test_defaults_point_at_local_postgres_and_redis() -> None:
    s = load_settings()
    assert s.database_url.startswith("postgresql+psycopg://") and "127.0.0.1:5432" in s.database_url
    assert s.broker_url == s.redis_url == "redis://127.0.0.1:6379/0"
    assert s.max_countdown_seconds * 2 <= s.visibility_timeout_seconds


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("JOBWARDEN_LEASE_TTL_SECONDS", "soon"),
        ("JOBWARDEN_LEASE_TTL_SECONDS", "-1"),
        ("JOBWARDEN_SWEEP_BATCH_SIZE", "0"),
        ("JOBWARDEN_VISIBILITY_TIMEOUT_SECONDS", "1.5"),
    ],
)
def test_a_bad_value_is_one_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=name):
        load_settings()


def test_a_countdown_longer_than_half_the_visibility_timeout_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("JOBWARDEN_MAX_COUNTDOWN_SECONDS", "3000")
    with pytest.raises(SettingsError, match="JOBWARDEN_MAX_COUNTDOWN_SECONDS"):
        load_settings()
