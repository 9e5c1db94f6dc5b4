"""The newcomer's path, from a fresh copy of the repository (issue 36, points 6 and 12).

A "fresh clone" here is every file git tracks, copied from the work tree into an empty
folder: what a clone of this commit holds (nothing ignored or untracked, no .venv, no
built site), with the working tree's content so an uncommitted edit is tested too. In it:

- the docs site builds with ``mkdocs build --strict`` (a broken link or anchor, a page
  missing from the nav or a missing include fails), offline, into a temporary folder;
- the README's first operation runs as written (db upgrade, the sandbox, a worker,
  submit, watch, result, verify) with the copy's code first on the path, and the
  tutorial shows the very same block;
- the generated reference pages are what ``scripts/gen_docs.py`` writes now;
- every shell block of the README, the docs and CONTRIBUTING is either run by a test or
  named below with the reason it is not.

What a newcomer installs (``pip install .``) is the interpreter running these tests.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import RUN_ID, scratch_database

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TUTORIAL = REPO / "docs" / "tutorial" / "first-operation.md"
FIRST_OPERATION = "## Your first operation in ten minutes"
# Shell blocks no test runs, by their first line, and why.
NOT_RUN = {
    "scripts/demo    # the main job": "the two commands: scripts/test is what runs this "
    "suite, and the demo's scenarios run in tests/integration/test_demo_*.py",
    "python3 -m venv .venv": "installing from the checkout: the interpreter running the "
    "tests is that install (tests/acceptance/test_packaging.py builds the wheel)",
    "scripts/test                  # ruff": "CONTRIBUTING's test command: this suite",
    "python scripts/gen_docs.py            # CLI": "run as --check by "
    "test_the_generated_reference_pages_are_not_stale",
}


def _bash_blocks(page: Path) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S)


def first_operation(page: Path, heading: str) -> str:
    """The first bash block under ``heading`` of ``page``."""
    section = page.read_text(encoding="utf-8").split(heading, 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert found is not None, f"{page.name}: no bash block under {heading!r}"
    return found.group(1)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every tracked file of the repository, copied into an empty folder."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    clone = tmp_path_factory.mktemp("clone")
    for name in filter(None, listed.split("\0")):
        source, target = REPO / name, clone / name
        if not source.is_symlink() and not source.exists():
            continue  # deleted in the work tree, not yet in the index
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return clone


def _clean_env(**extra: str) -> dict[str, str]:
    # Bytecode is written, as on a newcomer's machine (this one may set
    # PYTHONDONTWRITEBYTECODE): else the sandbox, the worker and each command of the first
    # operation compiled the copy's modules (and the --no-compile venv's) from source again.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("JOBWARDEN_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    bin_dir = str(Path(sys.executable).parent)
    return {**env, "PATH": f"{bin_dir}:{env.get('PATH', '')}", **extra}


def test_the_generated_reference_pages_are_not_stale() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_changed_command_makes_its_reference_page_stale(
    fresh_clone: Path, tmp_path: Path
) -> None:
    # The staleness check is worth something only if a change in the code trips it: a
    # command's help changed in a copy, its CLI page is named, nothing else.
    changed = tmp_path / "clone"
    shutil.copytree(fresh_clone, changed, symlinks=True)
    cli = changed / "jobwarden" / "cli" / "main.py"
    old = '"""The bounded options a human may pick for a stopped operation'
    assert old in cli.read_text(encoding="utf-8")
    cli.write_text(cli.read_text(encoding="utf-8").replace(old, '"""Options, reworded'))
    done = subprocess.run(
        [sys.executable, str(changed / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(PYTHONPATH=str(changed)),
        timeout=300,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "docs/reference/cli.md is stale: run python scripts/gen_docs.py"
    ]


def _mkdocs_build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=project,
        capture_output=True,
        text=True,
        check=False,
        env=_clean_env(NO_MKDOCS_2_WARNING="1"),
        timeout=300,
    )


@pytest.fixture(scope="module")
def built_site(fresh_clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    done = _mkdocs_build(fresh_clone, site)
    assert done.returncode == 0, done.stderr[-4000:]
    return site


def test_the_docs_site_builds_strict_from_a_fresh_clone(built_site: Path) -> None:
    for page in ("tutorial/first-operation", "reference/cli", "reference/http-api", "changelog"):
        assert (built_site / page / "index.html").is_file(), page
    # The includes brought the repository's own files in.
    assert "Unreleased" in (built_site / "changelog" / "index.html").read_text(encoding="utf-8")


def test_every_link_to_an_anchor_of_its_own_page_lands(built_site: Path) -> None:
    # mkdocs --strict checks the anchors of Markdown links, not of links written as HTML
    # (or made by the theme): the built pages are checked here, each href="#x" against
    # the ids of its own page.
    dangling = []
    for page in sorted(built_site.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        ids = set(re.findall(r'\sid="([^"]+)"', text))
        for target in re.findall(r'href="#([^"]*)"', text):
            if target and html.unescape(target) not in ids:
                dangling.append(f"{page.relative_to(built_site)}#{target}")
    assert dangling == []


def test_the_strict_build_fails_on_a_broken_link(fresh_clone: Path, tmp_path: Path) -> None:
    # The check above is worth something only if a broken link fails it.
    broken = tmp_path / "clone"
    shutil.copytree(fresh_clone, broken, symlinks=True)
    page = broken / "docs" / "how-to" / "history.md"
    page.write_text(page.read_text(encoding="utf-8") + "\n[gone](../no-such-page.md)\n")
    done = _mkdocs_build(broken, tmp_path / "site")
    assert done.returncode != 0
    assert "no-such-page.md" in done.stderr


def test_the_tutorial_runs_the_readmes_first_operation() -> None:
    assert first_operation(TUTORIAL, "## Run it") == first_operation(README, FIRST_OPERATION)


def test_the_readme_stays_a_front_page() -> None:
    # Issue 36: what it is, why, the two commands, a first operation, links; <= 150 lines.
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, len(lines)
    assert "scripts/demo" in README.read_text() and "scripts/test" in README.read_text()


def test_every_shell_block_is_run_by_a_test_or_named() -> None:
    run_elsewhere = {
        # tests/integration/test_readme_http.py
        _bash_blocks(REPO / "docs" / "how-to" / "http-api.md")[0],
        # the newcomer test below (the tutorial's is the same block, checked above)
        first_operation(README, FIRST_OPERATION),
    }
    pages = [README, REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
    unnamed = [
        f"{page.relative_to(REPO)}: {block.splitlines()[0]}"
        for page in pages
        for block in _bash_blocks(page)
        if block not in run_elsewhere and not any(block.startswith(k) for k in NOT_RUN)
    ]
    assert unnamed == [], "run these in a test, or name them in NOT_RUN with the reason"


@pytest.fixture
def newcomer_database() -> Iterator[str]:
    with scratch_database("jobwarden_newcomer") as url:
        yield url


@pytest.mark.timeout(300)
def test_the_readmes_first_operation_runs_from_a_fresh_clone(
    fresh_clone: Path, newcomer_database: str, tmp_path: Path
) -> None:
    # The one change made to the block: the sandbox's port (8765 may be taken where the
    # tests run), with JOBWARDEN_SANDBOX_URL pointing the contract at it.
    port = _free_port()
    script = first_operation(fresh_clone / "README.md", FIRST_OPERATION)
    script = script.replace("--port 8765", f"--port {port}")
    # Under the run's prefix: the session's end deletes what the README's worker left.
    own = f"jwtest-{RUN_ID}-newcomer-{secrets.token_hex(4)}"
    env = _clean_env(
        PYTHONPATH=str(fresh_clone),
        JOBWARDEN_DATABASE_URL=newcomer_database,
        JOBWARDEN_REDIS_URL=os.environ["JOBWARDEN_REDIS_URL"],
        JOBWARDEN_BROKER_URL=os.environ["JOBWARDEN_BROKER_URL"],
        JOBWARDEN_KEY_PREFIX=own,
        JOBWARDEN_QUEUE=own,
        JOBWARDEN_RESULT_STORE=(tmp_path / "results").as_uri(),
        JOBWARDEN_SANDBOX_URL=f"http://127.0.0.1:{port}",
    )
    work = tmp_path / "work"
    work.mkdir()
    out_file, err_file = tmp_path / "stdout", tmp_path / "stderr"
    # Files, not pipes: the background sandbox and worker keep their copies open.
    with out_file.open("w") as stdout, err_file.open("w") as stderr:
        proc = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=work,
            env=env,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=240)
        finally:
            # Whatever the script left running (it kills its own jobs when it succeeds).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    out, err = out_file.read_text(), err_file.read_text()
    logs = "".join(
        f"\n--- {name}\n{(work / name).read_text(errors='replace')[-1500:]}"
        for name in ("worker.log", "sandbox.log")
        if (work / name).exists()
    )
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-2000:]}{logs}"
    assert '"outcome": "created"' in out, out
    assert "stopped: succeeded" in out, out
    assert re.search(r"^chain verified: \d+ events", out, flags=re.M), out
    # The result file was written whole, and it is the sandbox's result document.
    assert '"record_count": 10' in (work / "result.json").read_text()
