"""The CLI's Typer class: help that names an option's value once, and nothing after a flag.

typer 0.28 and later print the Python annotation after every option (``--tenant <str>``,
``--json <bool>``, even ``--help <bool>``; issue 36, point 7). Commands of
:class:`CliTyper` give every option without a metavar the one click prints (TEXT,
INTEGER, FLOAT, PATH, a choice's values) and a flag none, through typer's public
extension points (a command class, an option's metavar), so the help reads the same on
every typer line the project runs and the docs generator prints what a user sees.
Only typer is imported: `jobwarden --help` loads no driver.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

# Parameters are typed loosely on purpose: typer 0.28+ builds on its own vendored copy of
# click (typer._click), earlier lines on click itself; both have these attributes.


# click's names for the Python types typer 0.28+ describes (it has no click type to ask).
_CLICK_NAMES = {"str": "TEXT", "int": "INTEGER", "float": "FLOAT", "bool": "BOOLEAN"}


def option_metavar(option: Any) -> str:
    """What help prints after ``option``: nothing for a flag, else click's type name."""
    if option.is_flag or option.count:
        return ""
    return value_kind(option)


def value_kind(param: Any) -> str:
    """click's name for the kind of value ``param`` takes: TEXT, INTEGER, PATH, a choice."""
    option = param
    kind = getattr(option, "type", None)
    if kind is not None:  # typer before 0.28: a click parameter type
        choices = getattr(kind, "choices", None)
        return _choices(choices) if choices is not None else str(kind.name).upper()
    described = option.type_descriptor
    if described.is_choice:
        return _choices(described.choices or ())
    if described.is_path:
        return "PATH"
    bare = str(option.bare_type()).removeprefix("list[").removesuffix("]")
    return _CLICK_NAMES.get(bare, bare.upper())


def _choices(choices: Any) -> str:
    return "[" + "|".join(str(getattr(c, "value", c)) for c in choices) + "]"


def _named(params: list[Any]) -> list[Any]:
    for param in params:
        if param.param_type_name == "option" and param.metavar is None:
            param.metavar = option_metavar(param)
        elif param.param_type_name == "argument" and getattr(param, "type", None) is None:
            # typer 0.28+ prints an argument's annotation too and takes no metavar for its
            # type column: this parameter object (made per command) answers click's name.
            label = value_kind(param)
            param.display_type_rich = lambda ctx, label=label: label
    return params


class CliCommand(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _named(super().get_params(ctx))


class CliGroup(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _named(super().get_params(ctx))


class CliTyper(typer.Typer):
    """A Typer app whose groups and commands print plain metavars (see the module)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("cls", CliGroup)
        super().__init__(**kwargs)

    def command(  # type: ignore[override]
        self, name: str | None = None, **kwargs: Any
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        kwargs.setdefault("cls", CliCommand)
        return super().command(name, **kwargs)
