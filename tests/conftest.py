"""Shared fixtures: a scratch database per test run, a Redis key prefix per run.

Tests talk to real servers; isolation is by database name and key prefix, never by
faking a server. Which servers is configurable, Unix sockets included:

- ``JOBWARDEN_TEST_ADMIN_URL``: a Postgres URL with the right to create databases
  (default: the server of ``JOBWARDEN_DATABASE_URL`` if set, else
  ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``). The scratch database
  lives on that server, under the same credentials and query (``?host=/run/postgresql``).
- ``JOBWARDEN_TEST_REDIS_URL``: the Redis for broker and leases (default:
  ``JOBWARDEN_REDIS_URL`` if set, else ``redis://127.0.0.1:6379/0``).

Every other ``JOBWARDEN_*`` setting is removed once those are read, so a developer's
own settings (providers folder, lease TTL, queue) never leak into a test.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, settings
from sqlalchemy.engine import make_url

from tests import door_matrix_report, socket_origins


class _PatientSettrace:
    """``sys`` for ``threading``, whose new threads retry installing the tracer.

    CPython 3.11 refuses ``sys.settrace`` while another thread is inside it (a process-wide
    guard in ``_PyEval_SetTrace``, python/cpython#98257), and under coverage every new
    thread installs coverage's tracer first thing (``threading._bootstrap_inner``). Threads
    started together, as a pool of eight is, could die before running a line (seen once
    in a full run: ``test_sandbox::test_concurrent_creates_with_one_key_make_one_job``).
    That is the harness failing, not the code under test; 3.12's coverage traces through
    sys.monitoring, which has no such guard. Everything else is ``sys`` itself.
    """

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)

    @staticmethod
    def settrace(function: Any) -> None:
        for _ in range(1000):  # bounded: the guard is held for one call's length
            try:
                sys.settrace(function)
                return
            except RuntimeError as exc:
                if "another trace function is being installed" not in str(exc):
                    raise
            time.sleep(0.001)
        sys.settrace(function)


if sys.version_info < (3, 12):
    threading._sys = _PatientSettrace()  # type: ignore[attr-defined]  # private, by design


# No test is timed (speed is the benchmarks' business, scripts/bench_*): Hypothesis's
# per-example deadline would fail a property on a loaded machine, not a wrong answer.
# Its too_slow health check likewise measures the machine: off for the same reason.
settings.register_profile("jobwarden", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("jobwarden")

RUN_ID = secrets.token_hex(4)
TEST_DB = f"jobwarden_test_{RUN_ID}"
DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
# Where a test run writes for a person to look at, not a setting of jobwarden's: kept.
KEPT = frozenset({"JOBWARDEN_SCREENSHOT_DIR"})


def _admin_url(environ: dict[str, str]) -> str:
    if "JOBWARDEN_TEST_ADMIN_URL" in environ:
        return environ["JOBWARDEN_TEST_ADMIN_URL"]
    if "JOBWARDEN_DATABASE_URL" in environ:
        # Same server and credentials, the maintenance database for CREATE DATABASE.
        url = make_url(environ["JOBWARDEN_DATABASE_URL"]).set(database="postgres")
        return url.render_as_string(hide_password=False)
    return DEFAULT_ADMIN_URL


def _redis_url(environ: dict[str, str]) -> str:
    return environ.get("JOBWARDEN_TEST_REDIS_URL") or environ.get(
        "JOBWARDEN_REDIS_URL", DEFAULT_REDIS_URL
    )


def _configure_environment() -> tuple[str, str]:
    environ = dict(os.environ)
    admin_url, redis_url = _admin_url(environ), _redis_url(environ)
    for name in environ:
        if name.startswith("JOBWARDEN_") and not name.startswith("JOBWARDEN_TEST_"):
            if name in KEPT:
                continue
            del os.environ[name]
    os.environ["JOBWARDEN_TEST_ADMIN_URL"] = admin_url
    os.environ["JOBWARDEN_TEST_REDIS_URL"] = redis_url
    scratch = make_url(admin_url).set(database=TEST_DB)
    os.environ["JOBWARDEN_DATABASE_URL"] = scratch.render_as_string(hide_password=False)
    os.environ["JOBWARDEN_REDIS_URL"] = redis_url
    os.environ["JOBWARDEN_BROKER_URL"] = redis_url
    os.environ["JOBWARDEN_KEY_PREFIX"] = f"jwtest-{RUN_ID}"
    os.environ["JOBWARDEN_QUEUE"] = f"jwtest-{RUN_ID}"
    # The run's own result store: a directory removed with the run, never the user's.
    results = Path(tempfile.gettempdir()) / f"jwtest-results-{RUN_ID}"
    os.environ["JOBWARDEN_RESULT_STORE"] = results.as_uri()
    atexit.register(shutil.rmtree, results, ignore_errors=True)
    return admin_url, redis_url


ADMIN_URL, REDIS_URL = _configure_environment()
socket_origins.watch(urlsplit(REDIS_URL).port or 6379)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Delete the keys this process's run left under its own prefix (every queue, lease,
    counter and nested prefix it made starts with it) on the shared Redis, which it did
    not start and never flushes: nothing of another run, or of anyone else, is touched."""
    from redis import Redis
    from redis.exceptions import RedisError

    with contextlib.suppress(RedisError, OSError), Redis.from_url(REDIS_URL) as redis:
        batch: list[bytes] = []
        for key in redis.scan_iter(match=f"jwtest-{RUN_ID}*", count=1000):
            batch.append(key)
            if len(batch) >= 500:
                redis.unlink(*batch)
                batch.clear()
        if batch:
            redis.unlink(*batch)


def pytest_configure(config: pytest.Config) -> None:
    # The doors x promises grid (DESIGN.md invariant 18), printed after the run.
    door_matrix_report.register(config)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    """An unclosed-socket failure says where that socket was opened (tests/socket_origins.py)."""
    report = yield
    if report.failed:
        found = socket_origins.origins_named_in(report.longreprtext)
        if found:
            report.sections.append(("where the unclosed socket was opened", "\n".join(found)))
    return report


@contextlib.contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """An empty database of a test's own on the admin server, dropped afterwards (even
    with connections left open): for tests that walk migrations or run a tool on it."""
    from sqlalchemy import create_engine, text

    name = f"{prefix}_{secrets.token_hex(4)}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    from sqlalchemy import create_engine, text

    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade

    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{TEST_DB}"'))
    url = os.environ["JOBWARDEN_DATABASE_URL"]
    upgrade(url)
    yield url
    dispose_all()
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)'))
    admin.dispose()


# The suite on several processes (scripts/test runs pytest-xdist with --dist loadgroup):
# each process has its own scratch database, key prefix and queue (RUN_ID above is drawn
# per process). A test file runs whole on one process, so its module fixtures start once.
# The acceptance tests share a package-scoped stack (two workers and a beat): they run as
# ACCEPTANCE_PROCESSES groups of whole files, each on one process that starts the stack
# once, and no integration test interleaves with them there to stop and restart it.
ACCEPTANCE_PROCESSES = 2
ACCEPTANCE_DURATIONS = Path(__file__).parent / "acceptance" / "durations.json"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "numprocesses", None):
        return
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    acceptance = {f: tests for f, tests in files.items() if f.startswith("tests/acceptance/")}
    # Longest first onto the lightest group, by the seconds each file took in a measured
    # run (tests/acceptance/durations.json, refreshed by scripts/test_durations.py; a file
    # not measured yet weighs the mean): by test count, a file of five browser or packaging
    # tests weighed as little as five table rows, and one group ran minutes longer.
    measured: dict[str, float] = json.loads(ACCEPTANCE_DURATIONS.read_text())
    mean = sum(measured.values()) / max(1, len(measured))
    weight = {f: measured.get(f, mean) for f in acceptance}
    loads = [0.0] * ACCEPTANCE_PROCESSES
    group_of: dict[str, str] = {}
    for name in sorted(acceptance, key=lambda f: (-weight[f], f)):
        lightest = loads.index(min(loads))
        loads[lightest] += weight[name]
        group_of[name] = f"acceptance-{lightest}"
    for name, tests in files.items():
        for item in tests:
            item.add_marker(pytest.mark.xdist_group(group_of.get(name, name)))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per Microsoft LRO scenario run (tests/acceptance/test_spector_lro.py), from
    the property each run recorded in its report, whichever process ran it."""
    verdicts: dict[str, str] = {}
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            props = dict(getattr(report, "user_properties", ()))
            if report.when != "call" or "test_spector_lro.py" not in report.nodeid:
                continue
            verdicts[report.nodeid] = props.get("spector_verdict", "FAIL (before its verdict)")
    if not verdicts:
        return
    terminalreporter.section("Microsoft TypeSpec LRO scenarios (tsp-spector)")
    for nodeid, verdict in sorted(verdicts.items()):
        scenario = nodeid.split("[", 1)[-1].split("]", 1)[0]
        terminalreporter.write_line(f"{verdict} {scenario}")
