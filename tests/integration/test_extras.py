"""The core install runs what a submitting service and a worker need; the doors are extras.

Each case runs in a fresh interpreter where every door's modules are made unimportable
(``sys.modules[name] = None`` makes ``import name`` raise ImportError, as when the
package is not installed), so the suite's own full install proves the light one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from jobwarden.cli.extras import EXTRAS
from jobwarden.demo.harness import REPO
from tests.integration import core_reads

# Every module an extra provides, and what they bring along (starlette, OpenTelemetry's API).
DOORS = sorted(
    {
        *(module.split(".")[0] for modules in EXTRAS.values() for module in modules),
        "starlette",
        "opentelemetry",
    }
    - set(EXTRAS["embedded"])  # the demo's fallback imports them only when it runs
)


def _without_doors(
    code: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    blocked = f"import sys\nsys.modules.update(dict.fromkeys({DOORS!r}))\n"
    return subprocess.run(
        [sys.executable, "-c", blocked + code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return _without_doors(
        f"sys.argv = ['jobwarden', *{list(args)!r}]\nfrom jobwarden.cli.main import main\nmain()",
        env,
    )


def test_submitting_working_and_the_demo_import_without_any_door() -> None:
    # Every module of the core (the domain, its tables and the migrations' models, the
    # tasks, the settings), the worker's app, the sandbox and the demo.
    done = _without_doors(
        "import importlib, pkgutil, jobwarden\n"
        "for package in ('jobwarden.models', 'jobwarden.tasks', 'jobwarden.config'):\n"
        "    root = importlib.import_module(package)\n"
        "    for info in pkgutil.walk_packages(root.__path__, package + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "jobwarden.submit, jobwarden.cancel, jobwarden.decide\n"
        "import jobwarden.config.celery_app, jobwarden.tasks.pipeline\n"
        "import jobwarden.demo.sandbox.server, jobwarden.demo.run, jobwarden.demo.embedded\n"
        "import jobwarden.cli.watch, jobwarden.cli.result\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{DOORS!r} and sys.modules[m] is not None)\n"
        "assert not loaded, loaded\n"
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("args", [["--help"], ["providers", "check"], ["history", "--help"]])
def test_core_commands_run_without_any_door(args: list[str]) -> None:
    done = _cli(*args)
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def read_target(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return core_reads.read_target(database_url, tmp_path_factory.mktemp("reads"))


@pytest.mark.parametrize("args", core_reads.READS, ids=[" ".join(a[:2]) for a in core_reads.READS])
def test_every_command_that_reads_runs_without_any_door(
    args: list[str], read_target: dict[str, str], database_url: str
) -> None:
    done = _cli(*core_reads.filled(args, read_target), env={"JOBWARDEN_DATABASE_URL": database_url})
    assert "Traceback" not in done.stderr and "extra" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("args", "extra"),
    [
        (["api"], "api"),
        (["mcp"], "mcp"),
        (["flower"], "flower"),
        (["tokens", "create", "--tenant", "t", "--name", "n", "--scope", "read"], "api"),
    ],
)
def test_a_door_without_its_extra_is_one_line_naming_it(args: list[str], extra: str) -> None:
    done = _cli(*args)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"needs the '{extra}' extra" in lines[0]
    assert f"pip install '.[{extra}]' in the jobwarden checkout" in lines[0]


def test_the_mcp_door_names_its_own_extra_when_only_it_is_missing() -> None:
    done = _without_doors(
        "for name in ('fastapi', 'starlette', 'uvicorn', 'httptools', 'jinja2',"
        " 'itsdangerous', 'prometheus_client'):\n"
        "    del sys.modules[name]\n"
        "sys.argv = ['jobwarden', 'mcp']\nfrom jobwarden.cli.main import main\nmain()"
    )
    assert done.returncode == 2
    assert "needs the 'mcp' extra" in done.stderr and "'.[mcp]'" in done.stderr


def test_the_core_dependencies_name_no_door() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    core = " ".join(project["dependencies"]).lower()
    for name in ("fastapi", "uvicorn", "mcp", "flower", "jinja2", "prometheus", "itsdangerous"):
        assert name not in core, name
    extras = project["optional-dependencies"]
    assert {"api", "mcp", "flower", "embedded", "notify", "test"} <= set(extras)
    assert "jobwarden[api,mcp,flower,notify]" in extras["test"]
