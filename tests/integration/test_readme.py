"""The README's Python examples run as written, against the test database and prefix."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


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
