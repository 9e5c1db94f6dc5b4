"""The reference table of each Azure convention's defaults, read off the code itself.

``docs/contracts.md`` ("Convention reference") carries this table between two markers,
and ``tests/unit/test_convention_reference.py`` keeps the page equal to what
``reference_markdown`` returns. Every cell is produced by calling the strategy
(``establish``, ``read_monitor_answer``, ``final_result``, ``required_evidence``) on a
probe answer, so the page cannot drift from the behaviour. Pure: the caller passes the
contracts (``jobwarden providers`` loads the shipped ones).
"""

from __future__ import annotations

from collections.abc import Mapping

from jobwarden.models.contracts.contract import Convention, ProviderContract
from jobwarden.models.contracts.routes import ChosenRoute
from jobwarden.models.conventions.evidence import (
    EVIDENCE_RULES,
    Tracked,
    final_result,
    required_evidence,
)
from jobwarden.models.conventions.strategies import (
    Monitor,
    establish,
    monitor_headers,
    read_monitor_answer,
)
from jobwarden.models.provider.signals import HttpObservation
from jobwarden.models.results.pages import MAX_HELD, MAX_PAGES, page_shape

__all__ = ["BEGIN", "END", "reference_markdown"]

BEGIN = "<!-- convention-reference:begin (generated: models/conventions/reference.py) -->"
END = "<!-- convention-reference:end -->"
_PROBE = "https://probe.example"
_METHODS = ("PUT", "PATCH", "POST", "DELETE")
_SPELLED = {
    "azure-asyncoperation": "Azure-AsyncOperation",
    "operation-location": "Operation-Location",
    "location": "Location",
}


def _obs(code: int, body: object = None, **headers: str) -> HttpObservation:
    return HttpObservation(
        status_code=code, headers=headers, body=body, body_problem=None, transport_failure=None
    )


def _precedence(contract: ProviderContract, method: str) -> str:
    """The create answer's headers in the order they win, found by removing each winner."""
    headers = {h: f"{_PROBE}/{h}" for h in (*monitor_headers(contract.convention), "location")}
    route = ChosenRoute(name="", method=method, path="/", body_pointer=None, final_state_via=None)
    order = []
    while headers:
        found = establish(contract, route, f"{_PROBE}/create", _obs(202, None, **headers))
        url = found.status_url if found is not None else None
        winner = next((h for h, named in headers.items() if named == url), None)
        if winner is None:
            break
        order.append(f"`{_SPELLED[winner]}`")
        del headers[winner]
    last = establish(contract, route, f"{_PROBE}/create", _obs(202, {"properties": {}}))
    if last is not None and last.monitor is Monitor.resource:
        order.append("the resource at the create URL")
    return " → ".join(order) or "—"


def _final_rules(contract: ProviderContract, monitor: Monitor, body: object = None) -> list[str]:
    cells = []
    for method in _METHODS:
        tracked = Tracked(
            method=method,
            final_state_via=None,
            monitor=monitor.value,
            request_url=f"{_PROBE}/create",
            final_url=f"{_PROBE}/location",
        )
        probe = body if body is not None else {"status": "Succeeded"}
        found = final_result(contract, tracked, probe, status_code=200)
        cells.append(found.rule)
    return cells


def _codes(contract: ProviderContract, monitor: Monitor) -> str:
    cells = []
    for code in (200, 201, 202, 204):
        body: object = None if code == 204 else {"properties": {}}
        answer = read_monitor_answer(contract, monitor, f"{_PROBE}/poll", _obs(code, body))
        bare = read_monitor_answer(contract, monitor, f"{_PROBE}/poll", _obs(code, None))
        meaning = "running" if answer.state == "InProgress" else "done"
        if bare.missing is not None and answer.missing is None:
            meaning += ", must carry a body"
        cells.append(f"{code} {meaning}")
    return "; ".join(cells)


def _paging(contract: ProviderContract) -> str:
    """How a final list continues (``models/result_pages``), as this contract pages it."""
    shape = page_shape(contract)
    if shape is None:
        return "never paged"
    return (
        f"items at `{shape.items}`, next page at `{shape.next}`, whether the final body was "
        f"a poll answer or fetched; at most {MAX_PAGES} pages and {MAX_HELD // 1024**2} MiB "
        "(`[result]` `items_pointer` and `next_link_pointer` override)"
    )


def reference_markdown(contracts: Mapping[Convention, ProviderContract]) -> str:
    """The table, one block per convention, as ``docs/contracts.md`` carries it."""
    lines = [BEGIN, ""]
    for convention, contract in contracts.items():
        states = contract.states
        result = contract.result
        ctype = (result.content_type or "not checked") if result is not None else "no [result]"
        lines += [
            f"**`{convention.value}`** (the shipped `{contract.name}.toml`)",
            "",
            "| rule | default |",
            "| --- | --- |",
            *(f"| monitor precedence, {m} | {_precedence(contract, m)} |" for m in _METHODS),
            f"| terminal states | succeeded {sorted(states.succeeded)}, failed "
            f"{sorted(states.failed)}, cancelled {sorted(states.cancelled)}; every other "
            f"state {states.otherwise.value}"
            f"{' (compared without case)' if states.case_insensitive else ''} |",
        ]
        monitors = [Monitor.status_monitor, Monitor.location]
        if convention is Convention.azure_arm:
            monitors.append(Monitor.resource)
        for monitor in monitors[1:]:
            lines.append(f"| status codes, `{monitor.value}` | {_codes(contract, monitor)} |")
        for monitor in monitors:
            rules = _final_rules(contract, monitor)
            cells = ", ".join(f"{m}: {r}" for m, r in zip(_METHODS, rules, strict=True))
            lines.append(f"| final result (no `final_state_via`), `{monitor.value}` | {cells} |")
        named = {"status": "Succeeded", "resourceLocation": f"{_PROBE}/target"}
        rules = _final_rules(contract, Monitor.status_monitor, named)
        cells = ", ".join(f"{m}: {r}" for m, r in zip(_METHODS, rules, strict=True))
        lines.append(f"| final result, `status_monitor` naming `resourceLocation` | {cells} |")
        evidence = ", ".join(f"{m}: {e.value}" for m, e in EVIDENCE_RULES.items())
        lines += [
            f"| evidence a final answer must carry | {evidence}; any 204: "
            f"{required_evidence('PUT', 204).value} |",
            f"| content type of a fetched final result | `{ctype}` (only a fetched body is "
            "checked; a body taken from a poll answer is not) |",
            f"| paged final result | {_paging(contract)} |",
            "",
        ]
    lines.append(END)
    return "\n".join(lines)
