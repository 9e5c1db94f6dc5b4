"""The spector harness: Microsoft's LRO scenario mocks, driven by hand, judged by spector.

One server serves the module; each test drives its own scenario, because spector keeps
a scenario's records and poll counters for the life of the process (tests/spector_server.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from jobwarden.demo.embedded import ServerStartError
from tests.spector_server import ScenarioStatus, SpectorServer

API_VERSION = {"api-version": "2022-12-01-preview"}
RPC = "/azure/core/lro/rpc"
STANDARD = "/azure/core/lro/standard"


@pytest.fixture(scope="module")
def spector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SpectorServer]:
    with SpectorServer(workdir=tmp_path_factory.mktemp("spector")) as server:
        yield server


@pytest.fixture
def client(spector: SpectorServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=spector.url, timeout=5.0) as client:
        yield client


def test_a_long_running_rpc_driven_by_hand_is_judged_passed_by_spector(
    spector: SpectorServer, client: httpx.Client
) -> None:
    submitted = client.post(
        f"{RPC}/generations:submit", params=API_VERSION, json={"prompt": "text"}
    )
    assert submitted.status_code == 202
    # The mock builds the Operation-Location from the request's Host, without api-version.
    location = submitted.headers["operation-location"]
    assert location == f"{spector.url}{RPC}/generations/operations/operation1"

    polls = [client.get(location, params=API_VERSION) for _ in range(2)]

    assert [(p.status_code, p.json()["status"]) for p in polls] == [
        (200, "InProgress"),
        (200, "Succeeded"),
    ]
    assert polls[1].json()["result"] == {"data": "text data"}
    assert spector.scenario_results()["Azure_Core_Lro_Rpc_longRunningRpc"] is ScenarioStatus.PASS
    mine = [r for r in spector.request_log() if r.path.startswith(RPC)]
    assert [(r.method, r.status, r.rejection) for r in mine] == [
        ("POST", 202, None),
        ("GET", 200, None),
        ("GET", 200, None),
    ]
    assert mine[1].path == f"{RPC}/generations/operations/operation1?api-version=2022-12-01-preview"
    assert mine[0].logged_at <= mine[1].logged_at <= mine[2].logged_at


def test_a_request_failing_the_mocks_expectations_is_rejected_and_never_counted(
    spector: SpectorServer, client: httpx.Client
) -> None:
    answer = client.delete(f"{STANDARD}/users/madge")  # no api-version

    assert answer.status_code == 400
    assert "api-version" in answer.json()["message"]
    [rejected] = [r for r in spector.rejections() if r.path.startswith(STANDARD)]
    assert (rejected.method, rejected.path, rejected.status) == (
        "DELETE",
        f"{STANDARD}/users/madge",
        400,
    )
    assert rejected.rejection is not None
    assert rejected.rejection.startswith("Expected query param api-version=2022-12-01-preview")
    # Spector records no answer for a refused request: the scenario is not failed, only unmet.
    results = spector.scenario_results()
    assert results["Azure_Core_Lro_Standard_delete"] is ScenarioStatus.NOT_IMPLEMENTED


def test_spector_passes_a_scenario_once_each_listed_uri_has_answered_not_at_the_last_step(
    spector: SpectorServer, client: httpx.Client
) -> None:
    # createOrReplace lists PUT and GET on users/madge and two polls on one operation uri;
    # spector keys its records by uri alone, so one PUT and one (InProgress) poll pass it.
    # An end-to-end test must check the request log for the polls it expects.
    created = client.put(
        f"{STANDARD}/users/madge", params=API_VERSION, json={"role": "contributor"}
    )
    assert created.status_code == 201
    poll = client.get(created.headers["operation-location"], params=API_VERSION)
    assert poll.json()["status"] == "InProgress"

    results = spector.scenario_results()

    assert results["Azure_Core_Lro_Standard_createOrReplace"] is ScenarioStatus.PASS


def test_the_server_answers_on_127_0_0_1_only(spector: SpectorServer) -> None:
    # Spector binds every interface; the helper's preload gives listen() the loopback host.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", spector.port), timeout=2).close()
    socket.create_connection(("127.0.0.1", spector.port), timeout=2).close()


def test_a_stopped_server_reports_from_the_coverage_file_it_wrote_on_exit(tmp_path: Path) -> None:
    server = SpectorServer(workdir=tmp_path)
    with server:
        running = server.scenario_results()

    assert server.coverage_path.exists()
    assert server.scenario_results() == running
    assert running["Azure_Core_Lro_Rpc_longRunningRpc"] is ScenarioStatus.NOT_IMPLEMENTED


def test_a_missing_install_is_refused_with_the_script_that_installs_it(tmp_path: Path) -> None:
    with pytest.raises(ServerStartError, match="run scripts/install_spector"):
        SpectorServer(workdir=tmp_path, install_dir=tmp_path).start()
