"""The layout is what is there (issue 35): the README's Layout section and
docs/reference/layout.md are generated from the package docstrings and are not stale, every
room and module says what it is, and no room is a flat heap."""

from __future__ import annotations

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


def test_a_missing_docstring_is_named() -> None:
    # The generator refuses a module without a docstring, naming it (never a traceback).
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_layout
    finally:
        sys.path.pop(0)
    bare = PACKAGE / "models" / "_layout_probe.py"
    bare.write_text("X = 1\n")
    try:
        try:
            gen_layout.reference_page()
        except SystemExit as stop:
            assert "models/_layout_probe.py: no docstring" in str(stop)
        else:
            raise AssertionError("a module without a docstring was accepted")
    finally:
        bare.unlink()
