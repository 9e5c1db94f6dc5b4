"""The embedded PostgreSQL starts as root from a checkout under a private folder
(issue 24: `initdb … Permission denied` from /root/app, mode 0700, in a container).

Under root the cluster runs as an unprivileged OS user, who cannot search a 0700 folder
of root's: the binaries must be run from a copy that user owns (jobwarden/demo/embedded.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from jobwarden.demo.embedded import LocalPostgres
from tests.private_servers import postgres_bin_dir


@pytest.mark.skipif(os.geteuid() != 0, reason="the private-folder case exists only under root")
@pytest.mark.timeout(240)
def test_the_embedded_postgres_starts_as_root_from_binaries_under_a_0700_folder(
    tmp_path: Path,
) -> None:
    private = tmp_path / "app"
    private.mkdir(mode=0o700)
    installed = postgres_bin_dir().parent
    shutil.copytree(installed, private / "pg", symlinks=True)
    assert private.stat().st_mode & 0o777 == 0o700
    server = LocalPostgres(private / "pg" / "bin", prefix="jobwarden-test-private-pg-")
    try:
        server.start()
        engine = create_engine(server.admin_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(text("SELECT 1")).scalar() == 1
        finally:
            engine.dispose()
        # It runs from its own copy, never from (or by loosening) the private folder.
        assert not server.bin.is_relative_to(private)
        assert private.stat().st_mode & 0o777 == 0o700
    finally:
        server.remove()
    assert not server.root.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="the private-folder case exists only under root")
def test_binaries_the_cluster_user_can_reach_are_run_where_they_are(tmp_path: Path) -> None:
    server = LocalPostgres(postgres_bin_dir(), prefix="jobwarden-test-open-pg-")
    try:
        assert server.bin == postgres_bin_dir()
    finally:
        server.remove()
