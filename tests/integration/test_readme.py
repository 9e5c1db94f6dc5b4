"""The Python examples and `$ jobwarden ...` lines of the README and the docs site run as
written, against the test database and prefix (issue 36: the examples moved from the README
into the how-to guides; wherever they are, they run).

The generated reference pages (docs/reference/) are left out: their `$ jobwarden [OPTIONS]`
lines are usage synopses typer writes, not commands.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_runner import run_cli

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [
    README,
    *sorted(
        p for p in (REPO / "docs").rglob("*.md") if "reference" not in p.relative_to(REPO).parts
    ),
]


def _blocks(fence: str) -> list[tuple[str, str]]:
    """(page#n, text) of every ``fence`` block of the pages, in order."""
    found = []
    for page in PAGES:
        blocks = re.findall(rf"```{fence}\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)
        name = page.relative_to(REPO).as_posix()
        found += [(f"{name}#{i}", block) for i, block in enumerate(blocks)]
    return found


BLOCKS = _blocks("python")
# Shell examples meant to run as written: the `$ jobwarden ...` lines of console blocks.
COMMANDS = sorted(
    {
        line.removeprefix("$ ")
        for _, block in _blocks("console")
        for line in block.splitlines()
        if line.startswith("$ jobwarden ")
    }
)


def test_the_readme_has_python_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("block", [b for _, b in BLOCKS], ids=[name for name, _ in BLOCKS])
def test_a_readme_example_runs_as_written(database_url: str, block: str) -> None:
    # A fresh interpreter, as a reader would run it: the JOBWARDEN_* variables the test
    # session set (scratch database, key prefix, queue) are its whole configuration.
    done = subprocess.run(
        [sys.executable, "-c", block],
        env={
            **os.environ,
            "JOBWARDEN_DATABASE_URL": database_url,
            # The shipped contracts and defaults, as a reader has them (an earlier test
            # package may have pointed these at its own variants).
            "JOBWARDEN_PROVIDERS_DIR": str(REPO / "config" / "providers"),
            "JOBWARDEN_LEASE_TTL_SECONDS": "150",
        },
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_readme_has_shell_examples() -> None:
    assert COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_shell_example_runs_as_written(database_url: str, command: str) -> None:
    argv = shlex.split(command)
    # The command's main() in this process (tests/cli_runner.py; the entry point itself is
    # test_cli.py's and test_install.py's): the same environment, a process start less.
    done = run_cli(
        *argv[1:],
        env={
            "JOBWARDEN_DATABASE_URL": database_url,
            "JOBWARDEN_PROVIDERS_DIR": str(REPO / "config" / "providers"),
            "JOBWARDEN_LEASE_TTL_SECONDS": "150",
        },
    )
    # A key already used by an earlier run answers replayed (0); a conflict would be 3.
    assert done.returncode == 0, done.stderr[-2000:]
