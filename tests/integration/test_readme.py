"""The README's Python examples run as written, against the test database and prefix."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
# Shell examples meant to run as written: the `$ jobwarden ...` lines of console blocks.
COMMANDS = [
    line.removeprefix("$ ")
    for block in re.findall(r"```console\n(.*?)```", README.read_text(), flags=re.S)
    for line in block.splitlines()
    if line.startswith("$ jobwarden ")
]


def test_the_readme_has_python_examples() -> None:
    assert BLOCKS


@pytest.mark.parametrize("block", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
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
            "JOBWARDEN_PROVIDERS_DIR": str(README.parent / "config" / "providers"),
            "JOBWARDEN_LEASE_TTL_SECONDS": "150",
        },
        cwd=README.parent,
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
    done = subprocess.run(
        [sys.executable, "-m", "jobwarden.cli.main", *argv[1:]],
        env={
            **os.environ,
            "JOBWARDEN_DATABASE_URL": database_url,
            "JOBWARDEN_PROVIDERS_DIR": str(README.parent / "config" / "providers"),
            "JOBWARDEN_LEASE_TTL_SECONDS": "150",
        },
        cwd=README.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # A key already used by an earlier run answers replayed (0); a conflict would be 3.
    assert done.returncode == 0, done.stderr[-2000:]
