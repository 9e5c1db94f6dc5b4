"""The layout is what is there (issue 35): the README's Layout section and
docs/reference/layout.md are generated from the package docstrings and are not stale, every
room and module says what it is, and no room is a flat heap."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import jobwarden

PACKAGE = Path(jobwarden.__file__).parent
REPO = PACKAGE.parent
# Rooms allowed past about 15 modules, and why. Migration versions are a sequence, not a room.
LARGER = {
    "jobwarden/models/persistence": "one module of SQL per concept of the core, 22 concepts",
    "jobwarden/api": "one module per resource of the HTTP API",
    "jobwarden/migrations/versions": "the migration chain",
}


def test_the_generated_layout_is_not_stale() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_layout.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_no_room_is_a_flat_heap() -> None:
    for init in PACKAGE.rglob("__init__.py"):
        room = init.parent
        modules = [p for p in room.glob("*.py") if p.name != "__init__.py"]
        rel = room.relative_to(REPO).as_posix()
        if rel not in LARGER:
            assert len(modules) <= 16, (rel, len(modules))


def test_a_missing_docstring_is_named(tmp_path: Path) -> None:
    # The generator refuses a module without a docstring, naming it (never a traceback). The
    # bare module goes in a copy of two rooms: written into the source tree it was seen by the
    # stale check running in another test process at the same moment (stop 45's CI).
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_layout
    finally:
        sys.path.pop(0)
    copy = tmp_path / "jobwarden"
    (copy / "models").mkdir(parents=True)
    shutil.copy(PACKAGE / "__init__.py", copy / "__init__.py")
    shutil.copy(PACKAGE / "models" / "__init__.py", copy / "models" / "__init__.py")
    assert "## `jobwarden/models/`" in gen_layout.reference_page(copy)
    (copy / "models" / "_layout_probe.py").write_text("X = 1\n")
    try:
        gen_layout.reference_page(copy)
    except SystemExit as stop:
        assert str(stop).startswith("jobwarden/models/_layout_probe.py: no docstring")
    else:
        raise AssertionError("a module without a docstring was accepted")
