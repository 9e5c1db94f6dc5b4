"""The built wheel installs one import root, and runs inside a service that has its own
``tasks.py``, ``models.py`` and ``config/`` (the cookiecutter-django layout).

The wheel is built from a fresh clone of the committed tree and installed into a new
virtual environment that borrows only the dependencies of .venv: the editable checkout
stays invisible, so what runs is what the wheel holds. The worker and the submitting
script both start in the service's folder, where a stray `import tasks` inside
jobwarden would find the service's module instead of ours.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import sysconfig
import tarfile
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from jobwarden.demo.harness import wait_for
from jobwarden.models.persistence.migrate import upgrade
from tests.acceptance.conftest import STOPPED
from tests.conftest import ADMIN_URL, RUN_ID

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SERVICE_FILES = {
    "tasks.py": '"""The service\'s own Celery tasks."""\n\nOWNER = "service"\n',
    "models.py": '"""The service\'s own models."""\n\nOWNER = "service"\n',
    "config/__init__.py": "",
    "config/celery_app.py": textwrap.dedent(
        '''\
        """The service's own Celery app, where cookiecutter-django puts it."""

        from celery import Celery

        OWNER = "service"
        app = Celery("service")
        '''
    ),
}
SUBMIT = textwrap.dedent(
    """\
    import json, sys

    import config.celery_app
    import models
    import tasks

    import jobwarden
    from jobwarden import SubmitOutcome, submit

    result = submit(
        tenant="packaging",
        provider="sandbox",
        idempotency_key=sys.argv[1],
        command={"kind": "export", "behaviour": {"polls_to_finish": 2, "result_items": 3}},
        requested_by="packaging-test",
    )
    assert result.outcome is SubmitOutcome.created, result
    owners = {m.__name__: m.OWNER for m in (tasks, models, config.celery_app)}
    print(json.dumps({"operation_id": result.operation_id, "jobwarden": jobwarden.__file__,
                      "owners": owners, "service_app": config.celery_app.app.main}))
    """
)


def _run(
    args: list[str | Path],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> str:
    done = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        timeout=timeout,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"{args[:4]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def _build_floor() -> str:
    """The lowest setuptools pyproject.toml's [build-system] admits (``setuptools>=X``)."""
    text = (REPO / "pyproject.toml").read_text()
    found = re.search(r'"setuptools>=([0-9.]+)"', text)
    assert found is not None, "[build-system] requires names no setuptools floor"
    return found.group(1)


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist, and the wheel built from that sdist (python -m build), from a fresh clone
    of the committed tree, in an isolated build environment holding exactly the lowest
    setuptools the build floor admits: a floor that does not build fails here."""
    work = tmp_path_factory.mktemp("dist")
    clone = work / "clone"
    _run(["git", "clone", "--quiet", REPO, clone])
    constraint = work / "build-constraint.txt"
    constraint.write_text(f"setuptools=={_build_floor()}\n")
    # build installs the build requirements with pip, which reads PIP_CONSTRAINT.
    env = {**os.environ, "PIP_CONSTRAINT": str(constraint)}
    done = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(work / "dist"), str(clone)],
        env=env,
        timeout=300,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # build lists the build environment's versions on stderr, once per sdist and wheel.
    assert done.stderr.count(f"setuptools=={_build_floor()}") == 2, done.stderr[-3000:]
    return work / "dist"


def test_twine_checks_the_sdist_and_the_wheel_as_pypi_would_take_them(dist: Path) -> None:
    # Until a release is published the README installs from the checkout or this wheel;
    # --strict: a warning (a README PyPI would not render, metadata missing) fails too.
    built = sorted(dist.iterdir())
    assert len(built) == 2, built
    out = _run([sys.executable, "-m", "twine", "check", "--strict", *built])
    assert out.count("PASSED") == 2, out


@pytest.fixture(scope="module")
def wheel(dist: Path) -> Path:
    (built,) = dist.glob("jobwarden-*.whl")
    return built


def test_the_sdist_holds_the_package_once_and_no_top_level_links(dist: Path) -> None:
    (sdist,) = dist.glob("jobwarden-*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = [name.split("/", 1)[1] for name in archive.getnames() if "/" in name]
        links = [m.name for m in archive.getmembers() if m.issym() or m.islnk()]
    assert links == []
    for module in ("models/effects.py", "tasks/steps.py", "config/providers/sandbox.toml"):
        assert f"jobwarden/{module}" in names, module
    # The repository's top-level links (models -> jobwarden/models) are not packaged.
    assert not any(name.split("/")[0] in ("models", "tasks", "config") for name in names)


@pytest.fixture(scope="module")
def venv_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv holding the wheel, and .venv's site-packages for the dependencies only."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([python, "-c", code]).strip())
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    # A path line in a .pth adds the directory but runs none of its own .pth files, so
    # .venv's editable-install hook for jobwarden never loads here.
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "borrowed-dependencies.pth").write_text("".join(f"{p}\n" for p in deps))
    return python


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra}
    # Nothing may point the new interpreter back at the checkout.
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


@pytest.fixture
def packaged_env(worker_env: dict[str, str]) -> Iterator[dict[str, str]]:
    """The acceptance environment with a database, queue and key prefix of its own, so
    that no worker or sweeper of the shared stack can touch this test's operation."""
    run = secrets.token_hex(4)
    admin_url = ADMIN_URL
    name = f"jobwarden_pkg_{run}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield _clean_env(
            {
                **worker_env,
                "JOBWARDEN_DATABASE_URL": url,
                # Under the run's prefix: the session's end deletes what the worker left.
                "JOBWARDEN_QUEUE": f"jwtest-{RUN_ID}-pkg-{run}",
                "JOBWARDEN_KEY_PREFIX": f"jwtest-{RUN_ID}-pkg-{run}",
                "JOBWARDEN_WORKER_NAME": "packaged",
            }
        )
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def test_the_wheel_holds_one_import_root_with_every_folder_in_it(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")]
        assert archive.read(top_level).decode() == "jobwarden\n"
    outside = [n for n in names if not re.match(r"(jobwarden/|jobwarden-[^/]+\.dist-info/)", n)]
    assert outside == []
    # The folders arrive through symlinks in jobwarden/: a build that skipped them would
    # still pass the checks above.
    for shipped in (
        "jobwarden/models/states.py",
        "jobwarden/tasks/pipeline.py",
        "jobwarden/config/celery_app.py",
        "jobwarden/config/providers/sandbox.toml",
        "jobwarden/migrations/env.py",
        "jobwarden/migrations/script.py.mako",
        "jobwarden/migrations/versions/0001_operations_and_events.py",
        "jobwarden/demo/sandbox/server.py",
    ):
        assert shipped in names, shipped


def test_the_new_venv_imports_jobwarden_from_the_wheel_not_the_checkout(
    venv_python: Path, tmp_path: Path
) -> None:
    code = "import celery, jobwarden; print(jobwarden.__file__); print(jobwarden.__version__)"
    where, version = _run([venv_python, "-c", code], cwd=tmp_path, env=_clean_env({})).split()
    assert Path(where).is_relative_to(venv_python.parent.parent)
    assert version == importlib.metadata.version("jobwarden")


def _start_worker(
    python: Path, cwd: Path, env: dict[str, str], log_file: Path
) -> subprocess.Popen[bytes]:
    with log_file.open("wb") as log:
        return subprocess.Popen(
            [
                str(python),
                "-m",
                "celery",
                "-A",
                "jobwarden.config.celery_app",
                "worker",
                "-Q",
                env["JOBWARDEN_QUEUE"],
                "--pool=prefork",
                "--concurrency=1",
                "-n",
                "packaged@%h",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=INFO",
            ],
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


def test_a_service_with_its_own_tasks_models_and_config_runs_the_packaged_worker(
    venv_python: Path, packaged_env: dict[str, str], tmp_path: Path
) -> None:
    service = tmp_path / "service"
    for relative, content in SERVICE_FILES.items():
        (service / relative).parent.mkdir(parents=True, exist_ok=True)
        (service / relative).write_text(content)
    log = tmp_path / "worker.log"
    worker = _start_worker(venv_python, service, packaged_env, log)
    engine = create_engine(packaged_env["JOBWARDEN_DATABASE_URL"])
    try:

        def ready() -> bool:
            if worker.poll() is not None:
                raise AssertionError(f"worker exited {worker.returncode}:\n{log.read_text()}")
            return " ready." in log.read_text(errors="replace")

        wait_for(ready, timeout=90, interval=0.1, what="the packaged worker to be ready")
        key = secrets.token_hex(8)
        answer = json.loads(_run([venv_python, "-c", SUBMIT, key], cwd=service, env=packaged_env))
        assert Path(answer["jobwarden"]).is_relative_to(venv_python.parent.parent)
        assert answer["owners"] == {
            "tasks": "service",
            "models": "service",
            "config.celery_app": "service",
        }
        assert answer["service_app"] == "service"

        def state() -> str:
            with engine.connect() as conn:
                return str(
                    conn.scalar(
                        text("SELECT state FROM operations WHERE operation_id = :id"),
                        {"id": answer["operation_id"]},
                    )
                )

        # Still running after the timeout fails the same assertion, with the worker's log.
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: state() in STOPPED, timeout=20, what="the operation to stop")
        assert state() == "succeeded", f"worker log:\n{log.read_text()[-4000:]}"
        with engine.connect() as conn:
            actors = set(
                conn.scalars(
                    text("SELECT actor FROM operation_events WHERE operation_id = :id"),
                    {"id": answer["operation_id"]},
                )
            )
        assert actors == {"submitter:packaging-test", "worker:packaged"}
    finally:
        engine.dispose()
        _stop(worker)
