"""Microsoft's own long-running-operation scenarios, end to end through real workers.

The mocks are Microsoft's TypeSpec scenario mocks (``@azure-tools/azure-http-specs``,
served by ``tsp-spector serve``: tests/spector_server.py), the ones the Azure SDKs'
pollers are tested against. A scenario passes here when the mock rejected none of our
requests (it checks methods, query and bodies itself), spector judges the scenario
passed, jobwarden ended as the scenario expects with the expected final body collected,
and ``verify`` is clean (the pipeline fixture). Scenario state lives in the mock
process, so each test drives one scenario to its end before the next begins.

Every scenario of the pinned package that involves a long-running operation runs here:
the ones whose TypeSpec declares an ``…Async`` ARM template or an Azure.Core LRO
(``tests/unit/test_spector_catalogue.py`` keeps this list equal to the package's), the
ones whose mocks finish in their first answer included. None is left out by design.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.acceptance.conftest import Pipeline
from tests.spector_server import SpectorServer

pytestmark = pytest.mark.usefixtures("stack")

SUB = "00000000-0000-0000-0000-000000000000"
ORDER = {
    "subscription": SUB,
    "resource_group": "test-rg",
    "namespace": "Azure.ResourceManager.OperationTemplates",
    "type": "orders",
    "name": "order1",
    "api_version": "2023-12-01-preview",
}
VALID_ORDER_ID = (
    f"/subscriptions/{SUB}/resourceGroups/test-rg/providers/"
    "Azure.ResourceManager.OperationTemplates/orders/order1"
)

# scenario -> (provider, command, expected final body or None for "no result")
_LRO: dict[str, tuple[str, dict[str, Any], Any]] = {
    "Azure_Core_Lro_Standard_createOrReplace": (
        "azure_lro",
        {
            "operation": "create-or-replace",
            "collection": "users",
            "name": "madge",
            "resource": {"role": "contributor"},
        },
        {"name": "madge", "role": "contributor"},
    ),
    "Azure_Core_Lro_Standard_delete": (
        "azure_lro",
        {"operation": "delete", "collection": "users", "name": "madge"},
        None,
    ),
    "Azure_Core_Lro_Standard_export": (
        "azure_lro",
        {"collection": "users", "name": "madge", "action": "export", "format": "json"},
        {"name": "madge", "resourceUri": "/users/madge"},
    ),
    "Azure_Core_Lro_Rpc_longRunningRpc": (
        "azure_lro_rpc",
        {"parameters": {"prompt": "text"}},
        {"data": "text data"},
    ),
    "Azure_ResourceManager_OperationTemplates_Lro_createOrReplace": (
        "azure_arm",
        {
            **ORDER,
            "resource": {
                "location": "eastus",
                "properties": {"productId": "product1", "amount": 1},
            },
        },
        "order",
    ),
    "Azure_ResourceManager_OperationTemplates_Lro_export": (
        "azure_arm",
        {
            **ORDER,
            "action": "resource-action",
            "operation": "export",
            "parameters": {"format": "csv"},
        },
        {"content": "order1,product1,1"},
    ),
    "Azure_ResourceManager_OperationTemplates_Lro_delete": (
        "azure_arm",
        {**ORDER, "action": "delete"},
        None,
    ),
    "Azure_ResourceManager_OperationTemplates_Lro_exportArray": (
        "azure_arm",
        {
            **ORDER,
            "action": "subscription-action",
            "operation": "exportArray",
            "parameters": {"format": "csv"},
        },
        [{"content": "order1,product1,1"}, {"content": "order2,product2,2"}],
    ),
}

RES = "Azure.ResourceManager.Resources"
RG_SCOPE = f"/subscriptions/{SUB}/resourceGroups/test-rg"
TOP = {
    "subscription": SUB,
    "resource_group": "test-rg",
    "namespace": RES,
    "type": "topLevelTrackedResources",
    "name": "top",
    "api_version": "2023-12-01-preview",
}
TOP_ID = f"{RG_SCOPE}/providers/{RES}/topLevelTrackedResources/top"
NESTED = {
    **TOP,
    "parent_type": "topLevelTrackedResources",
    "parent": "top",
    "type": "nestedProxyResources",
    "name": "nested",
}
EXT = {**TOP, "type": "extensionsResources", "name": "extension"}
EXT_BODY = {"resource": {"properties": {"description": "valid"}}}
EXT_ID = f"providers/{RES}/extensionsResources/extension"
Step = tuple[str, dict[str, Any], Any]


def _put(namespace: str, kind: str, name: str, version: str, resource: object) -> list[Step]:
    command = {
        "subscription": SUB,
        "resource_group": "test-rg",
        "namespace": namespace,
        "type": kind,
        "name": name,
        "api_version": version,
        "resource": resource,
    }
    return [("azure_arm", command, ("resource", f"{RG_SCOPE}/providers/{namespace}/{kind}/{name}"))]


def _with(base: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {**base, **more}


DESCRIBED = {"properties": {"description": "valid"}}
# scenario -> the operations it takes, in order: (provider, command, expected), expected
# being a final body, ("resource", its id), ("items", how many) for a paged list, or None
# for "no result". The ARM ones after _LRO finish in their first answer (a 200 with the
# resource, a 204), except LargeHeaders (two 6 KiB monitor URLs) and LroPaging (a paged
# final result whose nextLink is followed).
SCENARIOS: dict[str, list[Step]] = {
    **{name: [step] for name, step in _LRO.items()},
    "Azure_ResourceManager_Resources_TopLevel_createOrReplace": [
        (
            "azure_arm",
            _with(TOP, resource={"location": "eastus", **DESCRIBED}),
            ("resource", TOP_ID),
        )
    ],
    "Azure_ResourceManager_Resources_TopLevel_update": [
        (
            "azure_arm",
            _with(TOP, action="update", resource={"properties": {"description": "valid2"}}),
            ("resource", TOP_ID),
        )
    ],
    "Azure_ResourceManager_Resources_TopLevel_delete": [
        ("azure_arm", _with(TOP, action="delete"), None)
    ],
    "Azure_ResourceManager_Resources_Nested_createOrReplace": [
        (
            "azure_arm",
            _with(NESTED, action="child", resource=DESCRIBED),
            ("resource", f"{TOP_ID}/nestedProxyResources/nested"),
        )
    ],
    "Azure_ResourceManager_Resources_Nested_update": [
        (
            "azure_arm",
            _with(
                NESTED, action="child-update", resource={"properties": {"description": "valid2"}}
            ),
            ("resource", f"{TOP_ID}/nestedProxyResources/nested"),
        )
    ],
    "Azure_ResourceManager_Resources_Nested_delete": [
        ("azure_arm", _with(NESTED, action="child-delete"), None)
    ],
    "Azure_ResourceManager_Resources_Singleton_createOrUpdate": _put(
        RES,
        "singletonTrackedResources",
        "default",
        "2023-12-01-preview",
        {"location": "eastus", **DESCRIBED},
    ),
    "Azure_ResourceManager_Resources_ExtensionsResources_createOrUpdate": [
        ("azure_arm", {**EXT, **EXT_BODY}, ("resource", f"{RG_SCOPE}/{EXT_ID}")),
        (
            "azure_arm",
            _with(EXT, **EXT_BODY, action="subscription-resource"),
            ("resource", f"/subscriptions/{SUB}/{EXT_ID}"),
        ),
        ("azure_arm", _with(EXT, **EXT_BODY, action="tenant-resource"), ("resource", f"/{EXT_ID}")),
        (
            "azure_arm",
            _with(
                EXT,
                **EXT_BODY,
                action="extension",
                parent_namespace=RES,
                parent_type="topLevelTrackedResources",
                parent="top",
            ),
            ("resource", f"{TOP_ID}/{EXT_ID}"),
        ),
    ],
    "Azure_ResourceManager_MultiService_Compute_VirtualMachines_createOrUpdate": _put(
        "Microsoft.Compute",
        "virtualMachines",
        "vm1",
        "2025-04-01",
        {"location": "eastus", "properties": {}},
    ),
    "Azure_ResourceManager_MultiService_ComputeDisk_Disks_createOrUpdate": _put(
        "Microsoft.Compute",
        "disks",
        "disk1",
        "2025-01-02",
        {"location": "eastus", "properties": {}},
    ),
    "Azure_ResourceManager_MultiServiceOlderVersions_Compute_VirtualMachines_createOrUpdate": _put(
        "Microsoft.Compute",
        "virtualMachinesOld",
        "vm-old1",
        "2024-11-01",
        {"location": "eastus", "properties": {"size": "Standard_D2s_v3"}},
    ),
    "Azure_ResourceManager_MultiServiceOlderVersions_ComputeDisk_Disks_createOrUpdate": _put(
        "Microsoft.Compute",
        "disksOld",
        "disk-old1",
        "2024-03-02",
        {"location": "eastus", "properties": {"diskSizeGB": 128}},
    ),
    "Azure_ResourceManager_MultiServiceSharedModels_Compute_VirtualMachines_createOrUpdate": _put(
        "Microsoft.Compute",
        "virtualMachinesShared",
        "vm-shared1",
        "2025-05-01",
        {
            "location": "eastus",
            "properties": {
                "metadata": {"createdBy": "user@example.com", "tags": {"environment": "production"}}
            },
        },
    ),
    "Azure_ResourceManager_MultiServiceSharedModels_Storage_StorageAccounts_createOrUpdate": _put(
        "Microsoft.Storage",
        "storageAccounts",
        "account1",
        "2025-02-01",
        {
            "location": "westus",
            "properties": {
                "metadata": {
                    "createdBy": "admin@example.com",
                    "tags": {"department": "engineering"},
                }
            },
        },
    ),
    "Azure_ResourceManager_LargeHeader_LargeHeaders_two6k": [
        (
            "azure_arm",
            _with(
                TOP,
                namespace="Azure.ResourceManager.LargeHeader",
                type="largeHeaders",
                name="header1",
                action="resource-action",
                operation="two6k",
            ),
            {"succeeded": True},
        )
    ],
    "Azure_ResourceManager_OperationTemplates_LroPaging_postPagingLro": [
        (
            "azure_arm",
            _with(
                TOP,
                namespace="Azure.ResourceManager.OperationTemplates",
                type="products",
                name="default",
                action="resource-action",
                operation="postPagingLro",
            ),
            ("items", 2),
        )
    ],
}


def _check_result(stored: list[Any], expected: Any) -> None:
    if expected is None:
        assert stored == [], "a scenario without a final body stores none"
        return
    (content, _, _), *_ = stored
    body = json.loads(content)
    if expected == "order":
        assert body["id"] == VALID_ORDER_ID
        assert body["properties"]["provisioningState"] == "Succeeded"
    elif isinstance(expected, tuple) and expected[0] == "resource":
        assert body["id"] == expected[1], body
        assert body["properties"]["provisioningState"] == "Succeeded", body
    elif isinstance(expected, tuple) and expected[0] == "items":
        assert len(body["value"]) == expected[1], body
        assert "nextLink" not in body, body
    else:
        assert body == expected


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_microsofts_lro_scenario_passes_end_to_end(
    scenario: str,
    pipeline: Pipeline,
    spector: SpectorServer,
    record_property: Callable[[str, object], None],
) -> None:
    for provider, command, expected in SCENARIOS[scenario]:
        op = pipeline.submit(provider=provider, command=command)
        row = pipeline.wait_state(op, timeout=60)
        rejected = [(r.method, r.path[:200], r.rejection) for r in spector.rejections()]
        assert rejected == [], rejected
        assert row.state == "succeeded", pipeline.kinds(op)
        _check_result(pipeline.stored_results(op), expected)
    verdict = spector.scenario_results().get(scenario)
    # Carried in the test's report (across processes, when the suite runs on several):
    # tests/conftest.py prints one line per scenario in pytest's summary.
    record_property("spector_verdict", "PASS" if verdict == "pass" else f"FAIL ({verdict})")
    assert verdict == "pass", verdict
