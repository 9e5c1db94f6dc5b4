"""How the CLI prints what it found: rich tables with headers for people, an explicit
``none`` for an empty list, and JSON (``--json``) for scripts.

A table never wraps a cell when stdout is not a terminal (a pipe, a file, a test): it is
printed as wide as its widest row, so every record stays on one line a script can cut.
Cells are plain text, never read as rich markup (they quote provider and caller text).
Only rich is imported: `jobwarden --help` loads no driver.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

# What an empty list prints, so "nothing there" is never mistaken for "nothing printed".
NONE = "none"
# The width a table is measured in when stdout is not a terminal (no row is cut).
UNBOUNDED = 10_000


def table(console: Console, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """``rows`` under ``headers`` (a cell of None shows as ``-``), or ``none`` when empty."""
    if not rows:
        console.print(NONE, highlight=False, markup=False)
        return
    shown = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False, pad_edge=False)
    for header in headers:
        shown.add_column(header, no_wrap=not console.is_terminal)
    for row in rows:
        shown.add_row(*(Text("-" if cell is None else str(cell)) for cell in row))
    if console.is_terminal:
        console.print(shown)
        return
    # Rich never prints wider than its console: a console as wide as the table's widest row.
    wide = Console(file=console.file, width=UNBOUNDED, no_color=console.no_color, highlight=False)
    wide.print(shown, width=max(console.width, wide.measure(shown).maximum))


def fields(console: Console, pairs: Sequence[tuple[str, Any]]) -> None:
    """One record as ``name  value`` lines, names aligned (``-`` for None)."""
    width = max((len(name) for name, _ in pairs), default=0)
    for name, value in pairs:
        shown = "-" if value is None else str(value)
        console.print(f"{name:<{width}}  {shown}", highlight=False, markup=False)


def emit_json(value: Any) -> None:
    """``value`` as one line of JSON on stdout (dates and ids as strings)."""
    # Plain print: rich would colour and wrap it, and scripts read it as is.
    print(json.dumps(value, default=str, ensure_ascii=False), flush=True)


def command_argument(text: str, err: Console) -> Any:
    """The COMMAND argument parsed as JSON, or exit 2 saying why (a user's mistake: one
    line naming it, no traceback). A very deep array exhausts the parser's recursion: as
    much "not JSON" as a typo."""
    import typer

    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        problem = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        err.print(f"error: command is not usable JSON: {problem}", highlight=False)
        raise typer.Exit(2) from None
