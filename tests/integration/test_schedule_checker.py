"""Issue 33, finding 6: `jobwarden schedules check` (and sync) never end in a traceback.

Values past the documented bounds (docs/schedules.md, Bounds), a command nested deeper
than intake's bound, a file too deep for the TOML reader, a folder named like a file
and a broken link are each one line naming the file and the field; sync refuses the
same files and writes nothing, where 2^31 used to pass the check and fail in Postgres.
"""

from __future__ import annotations

from pathlib import Path

from jobwarden.models.persistence import schedule_store
from jobwarden.models.persistence.db import transaction
from tests.cli_runner import CliResult, run_cli
from tests.integration.api_helpers import tenant_name


def _cli(*args: str) -> CliResult:
    """``jobwarden ARGS`` in this process (tests/cli_runner.py)."""
    return run_cli(*args)


def _schedule(name: str, extra: str, command: str = '{ kind = "export" }') -> str:
    return f'[schedules.{name}]\nprovider = "sandbox"\ncommand = {command}\n{extra}\n'


def test_the_checker_names_every_hostile_file_and_field_and_sync_writes_nothing(
    tmp_path: Path, database_url: str
) -> None:
    tenant = tenant_name()
    deep = "{ a = " * 40 + "1" + " }" * 40
    body = "".join(
        [
            _schedule("huge", f"interval_seconds = {2**31}"),
            _schedule("jittery", f"interval_seconds = 60\njitter_seconds = {2**31}"),
            _schedule("late", f"interval_seconds = 60\ncatchup_window_seconds = {2**63 - 1}"),
            _schedule("ancient", "interval_seconds = 60\nstart = 0001-01-01T00:00:00+14:00"),
            _schedule("future", "interval_seconds = 60\nend = 9999-12-31T23:59:59-14:00"),
            _schedule("deep", "interval_seconds = 60", deep),
            _schedule(
                "wordy",
                f'cron = "{",".join(map(str, range(60)))} {",".join(map(str, range(24)))} * * *"',
            ),
        ]
    )
    (tmp_path / "hostile.toml").write_text(f'tenant = "{tenant}"\n\n{body}')
    (tmp_path / "abyss.toml").write_text("x = " + "[" * 5_000 + "]" * 5_000 + "\n")
    (tmp_path / "folder.toml").mkdir()
    (tmp_path / "gone.toml").symlink_to(tmp_path / "nowhere.toml")
    checked = _cli("schedules", "check", "--dir", str(tmp_path))
    assert checked.returncode == 1, checked.stderr
    assert "Traceback" not in checked.stderr + checked.stdout
    lines = sorted(checked.stderr.splitlines())
    assert lines == sorted(
        [
            "invalid abyss.toml: not valid TOML: nested too deep to read",
            "invalid gone.toml: cannot be read: No such file or directory",
            f"invalid hostile.toml: schedules.huge.interval_seconds: must be at most {366 * 86400}",
            "invalid hostile.toml: schedules.jittery.jitter_seconds: must be at most 86400",
            "invalid hostile.toml: schedules.late.catchup_window_seconds: must be at most "
            f"{366 * 86400}",
            "invalid hostile.toml: schedules.ancient.start: must lie within the years "
            "1970..9000 in UTC",
            "invalid hostile.toml: schedules.future.end: must lie within the years 1970..9000 "
            "in UTC",
            "invalid hostile.toml: schedules.deep.command: nested deeper than 32 levels "
            "(intake's bound)",
            "invalid hostile.toml: schedules.wordy.cron: longer than 200 characters",
        ]
    ), checked.stderr
    synced = _cli("schedules", "sync", "--dir", str(tmp_path))
    assert synced.returncode == 1
    assert "Traceback" not in synced.stderr + synced.stdout
    with transaction(database_url) as session:
        assert schedule_store.views(session, tenant=tenant) == []
    missing = _cli("schedules", "check", "--dir", str(tmp_path / "typo"))
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"invalid {tmp_path / 'typo'}: no such directory"
