"""The small code interface for providers that a contract file alone cannot describe.

A contract names a plugin as ``plugin = "package.module:attribute"``. The
attribute is an object (or a class constructible without arguments) with one
or both of the hooks below; ``load_plugin`` imports it once at start-up and
returns a value on which both hooks can always be called (a missing hook does
nothing). Plugins are pure: they see and return values, they never send
requests themselves, and this module imports no HTTP client.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol

from jobwarden.models.errors import ContractError

# The hook names, in the order the HTTP edge calls them.
PLUGIN_HOOKS: Final = ("prepare_request", "extract_status")

_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_PLUGIN_SPEC: Final = re.compile(rf"(?P<module>{_DOTTED}):(?P<attribute>{_DOTTED})\Z")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutboundRequest:
    """One request the HTTP edge is about to send, as plain data."""

    method: str
    url: str  # absolute
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None

    def with_headers(self, extra: dict[str, str]) -> OutboundRequest:
        """A copy with ``extra`` merged over the existing headers."""
        return OutboundRequest(
            method=self.method, url=self.url, headers={**self.headers, **extra}, body=self.body
        )


class ProviderPlugin(Protocol):
    """Hooks for a provider that needs code; both are called on every matching request."""

    def prepare_request(self, request: OutboundRequest) -> OutboundRequest:
        """Return the request to send instead (signing, computed headers). Must not do I/O."""
        ...

    def extract_status(self, body: object) -> object:
        """Reshape a parsed status body before the contract's JSON pointers read it."""
        ...


def is_plugin_spec(spec: str) -> bool:
    """Whether ``spec`` has the "module:attribute" shape (nothing is imported)."""
    return _PLUGIN_SPEC.match(spec) is not None


class _LoadedPlugin:
    """Adapter: the hooks the plugin defines, identity for the ones it does not."""

    __slots__ = ("_extract", "_file", "_prepare", "_spec")

    def __init__(
        self,
        *,
        spec: str,
        file: str,
        prepare: Callable[[OutboundRequest], object] | None,
        extract: Callable[[object], object] | None,
    ) -> None:
        self._spec = spec
        self._file = file
        self._prepare = prepare
        self._extract = extract

    def __repr__(self) -> str:
        return f"<plugin {self._spec}>"

    def prepare_request(self, request: OutboundRequest) -> OutboundRequest:
        if self._prepare is None:
            return request
        prepared = self._prepare(request)
        # A plugin returning the wrong type is a contract bug, not a transient failure.
        if not isinstance(prepared, OutboundRequest):
            raise ContractError(
                self._file,
                "plugin",
                f"{self._spec}.prepare_request returned {type(prepared).__name__}, "
                "not an OutboundRequest",
            )
        return prepared

    def extract_status(self, body: object) -> object:
        if self._extract is None:
            return body
        return self._extract(body)


def load_plugin(spec: str, *, file: str = "(plugin)") -> ProviderPlugin:
    """Import ``spec`` ("module:attribute") and return it as a ProviderPlugin.

    ``file`` names the contract that asked for the plugin, for the error.
    Raises ContractError (field ``plugin``) when the spec is malformed, the
    import or the no-argument construction fails, or the object defines none
    of the hooks or a hook that is not callable.
    """

    def fail(problem: str) -> ContractError:
        return ContractError(file, "plugin", problem)

    match = _PLUGIN_SPEC.match(spec)
    if match is None:
        raise fail(f"must have the form 'package.module:attribute', got {spec!r}")
    module_name, attribute = match["module"], match["attribute"]
    try:
        target: object = importlib.import_module(module_name)
    except Exception as exc:  # any failure inside third-party module code
        raise fail(f"could not import module {module_name!r}: {type(exc).__name__}: {exc}") from exc
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise fail(f"module {module_name!r} has no attribute {attribute!r}") from None
    if isinstance(target, type):
        try:
            target = target()
        except Exception as exc:  # the plugin's own constructor failed
            raise fail(
                f"could not construct {spec} without arguments: {type(exc).__name__}: {exc}"
            ) from exc

    hooks: dict[str, Callable[..., object] | None] = {}
    for hook in PLUGIN_HOOKS:
        value = getattr(target, hook, None)
        if value is not None and not callable(value):
            raise fail(f"{spec}.{hook} is not callable")
        hooks[hook] = value
    if all(value is None for value in hooks.values()):
        raise fail(f"{spec} defines none of the hooks: {', '.join(PLUGIN_HOOKS)}")
    return _LoadedPlugin(
        spec=spec, file=file, prepare=hooks["prepare_request"], extract=hooks["extract_status"]
    )
