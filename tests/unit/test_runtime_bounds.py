"""A worker refuses to start when a contract's requests could outlive the lease."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobwarden.config.settings import Settings
from jobwarden.models.errors import SettingsError
from jobwarden.tasks.runtime import build_runtime
from jobwarden.tasks.runtime import close as close_runtime

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"


def test_a_lease_shorter_than_the_requests_it_must_cover_stops_start_up() -> None:
    with pytest.raises(SettingsError, match="JOBWARDEN_LEASE_TTL_SECONDS"):
        build_runtime(Settings(lease_ttl_seconds=5, providers_dir=SHIPPED))


def test_the_default_lease_lets_the_shipped_contracts_start() -> None:
    runtime = build_runtime(Settings(lease_ttl_seconds=150, providers_dir=SHIPPED))
    assert set(runtime.contexts) >= {"sandbox", "azure_lro", "google_aip151", "openai_batch"}
    close_runtime(runtime)
