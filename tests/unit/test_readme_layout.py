"""The README's Layout section lists what is there: every module of the core, its
persistence, the shell and the package's own top level, and every subpackage.

A module added without a line in the Layout, or a line naming a module that is gone,
fails here (issue 19, item 7: "a README layout section that lists what is there").
"""

from __future__ import annotations

import re
from pathlib import Path

import jobwarden

PACKAGE = Path(jobwarden.__file__).parent
README = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
FOLDERS = [PACKAGE / "models", PACKAGE / "models" / "persistence", PACKAGE / "tasks", PACKAGE]


def _layout() -> str:
    start = README.index("\n## Layout\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end != -1 else None]


def _modules() -> set[str]:
    return {p.name for folder in FOLDERS for p in folder.glob("*.py") if p.name != "__init__.py"}


def test_every_module_is_named_in_the_layout() -> None:
    named = set(re.findall(r"`([a-z_]+\.py)`", _layout()))
    assert _modules() - named == set()


def test_the_layout_names_no_module_that_is_gone() -> None:
    named = set(re.findall(r"`([a-z_]+\.py)`", _layout()))
    # Modules of the subpackages (api/, console/, sandbox/) and tests may be named too.
    elsewhere = {p.name for p in PACKAGE.rglob("*.py")} | {
        p.name for p in (PACKAGE.parent / "tests").rglob("*.py")
    }
    # And the service's own modules the packaging sentence speaks of.
    theirs = {"tasks.py", "models.py"}
    assert named - _modules() - elsewhere - theirs == set()


def test_every_subpackage_is_named_in_the_layout() -> None:
    layout = _layout()
    for init in PACKAGE.glob("*/__init__.py"):
        assert f"`{init.parent.name}/`" in layout or f"jobwarden/{init.parent.name}" in layout, (
            init.parent.name
        )
