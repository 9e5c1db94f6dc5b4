"""The Spector scenarios run in tests/acceptance/test_spector_lro.py are every scenario of
the pinned ``@azure-tools/azure-http-specs`` that involves a long-running operation.

An operation is long-running when its TypeSpec declares it with an ARM ``…Async``
template (``ArmResourceCreateOrReplaceAsync``, ``ArmCustomPatchAsync``,
``ArmResourceDeleteWithoutOkAsync``, ``ArmResourceActionAsync`` …) or an Azure.Core
``LongRunning…`` operation; its scenario is the mock's ``Scenarios.<…>_<Interface>_<op>``
in the same folder. Read from the installed package (scripts/install_spector); without it
this test is skipped, as the acceptance test is.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.acceptance.test_spector_lro import SCENARIOS

SPECS = (
    Path(__file__).resolve().parents[1]
    / "spector"
    / "node_modules"
    / "@azure-tools"
    / "azure-http-specs"
    / "specs"
)
_LRO_OP = re.compile(r"^\s*(?:op\s+)?(\w+)\s+is\s+[\w.]*(?:Async|LongRunning)\w*<", re.M)
_INTERFACE = re.compile(r"^\s*interface\s+(\w+)", re.M)
_SCENARIO = re.compile(r"^Scenarios\.(\w+)\s*=", re.M)


def _lro_scenarios() -> set[str]:
    found: set[str] = set()
    for tsp in SPECS.rglob("*.tsp"):
        text = tsp.read_text()
        mock = tsp.parent / "mockapi.ts"
        if not mock.exists():
            continue
        names = _SCENARIO.findall(mock.read_text())
        for match in _LRO_OP.finditer(text):
            interfaces = [m.group(1) for m in _INTERFACE.finditer(text, 0, match.start())]
            suffix = f"_{interfaces[-1]}_{match.group(1)}" if interfaces else f"_{match.group(1)}"
            found |= {n for n in names if n.endswith(suffix)}
    return found


@pytest.mark.skipif(not SPECS.exists(), reason="scripts/install_spector has not run")
def test_every_spector_scenario_with_a_long_running_operation_is_run() -> None:
    declared = _lro_scenarios()
    assert len(declared) >= 20, sorted(declared)
    assert sorted(declared - set(SCENARIOS)) == []
    assert sorted(set(SCENARIOS) - declared) == []
