"""Create routes: which method and URL a command is sent to, filled from the command.

A contract serves an API, not one route: ``[create]`` is the default route and
``[create.routes.<name>]`` are others, chosen by the command's value at
``create.route_pointer``. A path's ``{command.<name>}`` placeholders are filled from
the *validated* command, each value percent-encoded as one path segment (RFC 3986
section 3.3: a ``/`` or ``?`` in a value must never open a new segment or a query), so
one ARM contract drives ``/subscriptions/{command.subscription}/...`` for every
resource. A missing placeholder is refused at submission (``route_problem``), never
sent as an empty segment.

Provider-named identities placed into a path (an ARM resource id as ``{job_id}``) are
encoded segment by segment (``place_job_id``): their ``/`` stays a separator, anything
else is escaped, and a ``.``/``..`` segment is refused before any URL is built.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from jobwarden.models.contracts.contract import (
    CreateRoute,
    CreateSpec,
    FinalStateVia,
    ProviderContract,
)
from jobwarden.models.provider.pointers import MISSING, resolve_pointer

__all__ = [
    "COMMAND_PLACEHOLDER",
    "ChosenRoute",
    "choose_route",
    "fill_path",
    "place_job_id",
    "placeholder_names",
    "request_body",
    "route_problem",
]

# {command.subscription}, {command.order.name}: object keys joined by dots.
COMMAND_PLACEHOLDER: Final = re.compile(r"\{command\.([A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*)\}")
# A placeholder value must be a plain JSON scalar, bounded: it becomes one path segment.
MAX_SEGMENT = 500


@dataclass(frozen=True, slots=True, kw_only=True)
class ChosenRoute:
    """The route a command takes, as a value: the default one is named ``""``."""

    name: str
    method: str
    path: str  # the template, placeholders not yet filled
    body_pointer: str | None
    final_state_via: FinalStateVia | None


def _default(spec: CreateSpec) -> ChosenRoute:
    return ChosenRoute(
        name="",
        method=spec.method,
        path=spec.path,
        body_pointer=spec.body_pointer,
        final_state_via=spec.final_state_via,
    )


def _named(name: str, route: CreateRoute) -> ChosenRoute:
    return ChosenRoute(
        name=name,
        method=route.method,
        path=route.path,
        body_pointer=route.body_pointer,
        final_state_via=route.final_state_via,
    )


def placeholder_names(path: str) -> tuple[str, ...]:
    return tuple(m.group(1) for m in COMMAND_PLACEHOLDER.finditer(path))


def _route_name(spec: CreateSpec, command: Mapping[str, Any]) -> object:
    if spec.route_pointer is None:
        return None
    found = resolve_pointer(command, spec.route_pointer)
    return None if found is MISSING else found


def choose_route(spec: CreateSpec, command: Mapping[str, Any]) -> ChosenRoute:
    """The route named by the command (``route_problem`` refused any other at intake)."""
    name = _route_name(spec, command)
    if isinstance(name, str) and name in spec.routes:
        return _named(name, spec.routes[name])
    return _default(spec)


def _segment_value(command: Mapping[str, Any], dotted: str) -> str | None:
    value: object = command
    for key in dotted.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return text if 0 < len(text) <= MAX_SEGMENT else None


def route_problem(contract: ProviderContract, command: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(field, problem)`` when the command cannot fill its route, else None.

    Checked at submission, before anything is recorded: the field names where in the
    submission the fault lies (``command.subscription``), as every intake error does.
    """
    spec = contract.create
    name = _route_name(spec, command)
    if (
        spec.route_pointer is not None
        and name is not None
        and (not isinstance(name, str) or name not in spec.routes)
    ):
        known = ", ".join(sorted(spec.routes)) or "none"
        where = "command" + spec.route_pointer.replace("/", ".")
        return where, f"names no route of provider {contract.name!r} (routes: {known})"
    route = choose_route(spec, command)
    for dotted in placeholder_names(route.path):
        if _segment_value(command, dotted) is None:
            return (
                f"command.{dotted}",
                f"is required by the create path {route.path.split('?')[0]!r}: "
                f"a string or integer of 1 to {MAX_SEGMENT} characters",
            )
    return None


def fill_path(path: str, command: Mapping[str, Any]) -> str:
    """The path with every ``{command.<name>}`` replaced by its value as one encoded segment.

    ``route_problem`` refused a command that cannot fill it; a value missing anyway
    (a row written before the route existed) fills nothing rather than guessing.
    """

    def one(match: re.Match[str]) -> str:
        value = _segment_value(command, match.group(1))
        return quote(value, safe="") if value is not None else ""

    return COMMAND_PLACEHOLDER.sub(one, path)


def request_body(route: ChosenRoute, command: Mapping[str, Any]) -> tuple[bool, object]:
    """``(has_body, body)``: a DELETE sends none (RFC 9110 section 9.3.5 gives a DELETE body
    no defined semantics); else the command, or its value at the route's body pointer."""
    if route.method == "DELETE":
        return False, None
    if route.body_pointer is None or route.body_pointer == "":
        return True, dict(command)
    found = resolve_pointer(command, route.body_pointer)
    if found is MISSING:
        return False, None
    return True, found


_BAD_SEGMENTS: Final = frozenset({"", ".", ".."})
# RFC 3986 pchar less "%": an id is an identity, so a "%" in it is escaped too.
_PCHAR: Final = "!$&'()*+,;=:@-._~"


def place_job_id(template: str, job_id: str) -> str | None:
    """``template`` with ``{job_id}`` replaced by the id encoded segment by segment.

    An ARM resource id (``/subscriptions/.../orders/order1``) keeps its ``/`` separators;
    every other reserved character is escaped, so an id cannot add a query or a fragment.
    A leading ``/`` is dropped where the template already has one before the placeholder.
    None when a segment is empty, ``.`` or ``..`` (a dot-segment would climb out of the
    path, RFC 3986 section 5.2.4).
    """
    body = job_id[1:] if job_id.startswith("/") and "/{job_id}" in template else job_id
    lead = body.startswith("/")
    segments = (body[1:] if lead else body).split("/")
    if any(s in _BAD_SEGMENTS for s in segments):
        return None
    encoded = ("/" if lead else "") + "/".join(quote(s, safe=_PCHAR) for s in segments)
    return template.replace("{job_id}", encoded)
