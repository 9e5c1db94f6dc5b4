"""A worker refuses to start when a contract's requests could outlive the lease."""

from __future__ import annotations

import pytest

from jobwarden.config.settings import Settings
from jobwarden.models.errors import SettingsError
from jobwarden.tasks.runtime import build_runtime


def test_a_lease_shorter_than_the_requests_it_must_cover_stops_start_up() -> None:
    with pytest.raises(SettingsError, match="JOBWARDEN_LEASE_TTL_SECONDS"):
        build_runtime(Settings(lease_ttl_seconds=5))


def test_the_default_lease_lets_the_shipped_contracts_start() -> None:
    runtime = build_runtime(Settings())
    assert set(runtime.contexts) >= {"sandbox", "azure_lro", "google_aip151", "openai_batch"}
    runtime.http.close()
