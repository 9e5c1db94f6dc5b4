"""Settings: defaults that work locally, one clear error naming a bad variable, and a
lease long enough for the requests a step sends under it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from jobwarden.config.settings import DEFAULT_PROVIDERS_DIR, load_settings
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.loader import load_contracts
from jobwarden.models.errors import SettingsError
from jobwarden.tasks.provider.edge import check_request_bounds


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
        ("JOBWARDEN_INTERVENTION_WAIT_SECONDS", "0"),
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


# -- every request ends before the lease it runs under -----------------------------------


def _with_timeout(contract: ProviderContract, seconds: float) -> ProviderContract:
    limits = dataclasses.replace(contract.limits, request_timeout_seconds=seconds)
    return dataclasses.replace(contract, limits=limits)


def test_the_default_lease_outlasts_every_shipped_contracts_requests() -> None:
    contracts = load_contracts(DEFAULT_PROVIDERS_DIR)
    assert contracts
    check_request_bounds(contracts, load_settings())


@pytest.mark.parametrize(
    ("ttl", "timeout", "allowed"),
    [
        ("5", 2.0, True),  # two requests of 2 s and the 1 s margin: exactly the lease
        ("4.9", 2.0, False),
        ("60", 30.0, False),  # the lease alone is not enough: the step may send twice
        ("61", 30.0, True),
    ],
)
def test_a_lease_shorter_than_two_requests_and_a_margin_is_refused_naming_both(
    monkeypatch: pytest.MonkeyPatch, ttl: str, timeout: float, allowed: bool
) -> None:
    monkeypatch.setenv("JOBWARDEN_LEASE_TTL_SECONDS", ttl)
    shipped = load_contracts(DEFAULT_PROVIDERS_DIR)["sandbox"]
    contracts = {"sandbox": _with_timeout(shipped, timeout)}
    if allowed:
        check_request_bounds(contracts, load_settings())
        return
    with pytest.raises(SettingsError) as refused:
        check_request_bounds(contracts, load_settings())
    message = str(refused.value)
    assert "JOBWARDEN_LEASE_TTL_SECONDS" in message and "provider sandbox" in message
    assert "request_timeout_seconds" in message


def test_a_setting_may_come_from_the_file_its_file_variable_names(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = tmp_path / "database_url"
    secret.write_text("postgresql+psycopg://jw:s3cret@db:5432/jobwarden\n")
    monkeypatch.setenv("JOBWARDEN_DATABASE_URL_FILE", str(secret))
    key = tmp_path / "console"
    key.write_text("  console-key  ")
    monkeypatch.setenv("JOBWARDEN_CONSOLE_SESSION_SECRET_FILE", str(key))
    s = load_settings()
    assert s.database_url == "postgresql+psycopg://jw:s3cret@db:5432/jobwarden"
    assert s.console_session_secret is not None
    assert s.console_session_secret.get_secret_value() == "console-key"


def test_a_file_variable_that_cannot_be_read_or_doubles_its_twin_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("JOBWARDEN_DATABASE_URL_FILE", str(missing))
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert str(caught.value) == (
        f"JOBWARDEN_DATABASE_URL_FILE: cannot read {missing} (No such file or directory)"
    )
    missing.write_text("postgresql+psycopg://jw@db/jobwarden")
    monkeypatch.setenv("JOBWARDEN_DATABASE_URL", "postgresql+psycopg://other@db/jobwarden")
    with pytest.raises(
        SettingsError, match="JOBWARDEN_DATABASE_URL and JOBWARDEN_DATABASE_URL_FILE"
    ):
        load_settings()


def test_a_bad_value_read_from_a_file_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bad = tmp_path / "port"
    bad.write_text("eighty")
    monkeypatch.setenv("JOBWARDEN_API_PORT_FILE", str(bad))
    with pytest.raises(SettingsError, match="JOBWARDEN_API_PORT"):
        load_settings()
