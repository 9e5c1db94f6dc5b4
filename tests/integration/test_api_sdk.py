"""The OpenAPI document is one a generator makes a good SDK from (issue 36, point 8).

Explicit operation ids (not FastAPI's ``submit_v1_operations_post``), one RFC 9457
``Problem`` schema referenced by every error answer (not a copy per route and status),
named request bodies; and /docs served from the installed package, never a CDN. The
SDK test runs openapi-python-client (pinned, in a venv of its own) on the document and
drives the generated client against a real server.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.api.docs_ui import ASSETS, ASSETS_PATH, assets_dir
from tests.api_server import serving
from tests.integration.api_helpers import make_token, tenant_name

REPO = Path(__file__).resolve().parents[2]

# Every operation of the document and its id: what an SDK's methods are called.
OPERATION_IDS = {
    "GET /healthz": "get_health",
    "GET /readyz": "get_readiness",
    "POST /v1/operations": "submit_operation",
    "GET /v1/operations": "list_operations",
    "GET /v1/operations/{operation_id}": "get_operation",
    "GET /v1/operations/{operation_id}/events": "list_operation_events",
    "GET /v1/escalations": "list_escalations",
    "GET /v1/operations/{operation_id}/result": "download_result",
    "HEAD /v1/operations/{operation_id}/result": "head_result",
    "POST /v1/operations/{operation_id}/cancel": "cancel_operation",
    "POST /v1/operations/{operation_id}/approvals": "approve_operation",
    "POST /v1/operations/{operation_id}/decisions": "decide_operation",
    "POST /v1/operations/{operation_id}/follow-ups": "start_follow_up",
    "GET /v1/operations/{operation_id}/receipt": "get_operation_receipt",
    "POST /v1/operations/{operation_id}/pause": "pause_operation",
    "POST /v1/providers/{provider}/pause": "pause_provider",
    "POST /v1/pauses/{pause_id}/resume": "resume_pause",
    "GET /v1/pauses": "list_pauses",
    "GET /v1/providers/{provider}/breaker": "show_breaker",
    "POST /v1/providers/{provider}/breaker/hold": "hold_breaker",
    "POST /v1/providers/{provider}/breaker/close": "close_breaker",
    "GET /.well-known/jobwarden-receipt-key": "get_receipt_public_key",
    "POST /v1/webhooks/{provider}": "receive_webhook",
    "GET /v1/schedules": "list_schedules",
    "GET /v1/schedules/{name}": "get_schedule",
    "PUT /v1/schedules/{name}": "put_schedule",
    "POST /v1/schedules/{name}/pause": "pause_schedule",
    "POST /v1/schedules/{name}/resume": "resume_schedule",
    "POST /v1/schedules/{name}/trigger": "trigger_schedule",
    "POST /v1/schedules/{name}/backfill": "backfill_schedule",
}
PROBLEM_REF = "#/components/schemas/Problem"
PACKAGE = "jobwarden_sdk"


def _document() -> dict[str, Any]:
    document: dict[str, Any] = create_app().openapi()
    return document


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{method.upper()} {path}": operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }


def test_every_operation_has_its_explicit_operation_id() -> None:
    ids = {label: op["operationId"] for label, op in _operations(_document()).items()}
    assert ids == OPERATION_IDS


def test_every_error_answer_references_the_one_problem_schema() -> None:
    document = _document()
    inline = []
    for label, op in _operations(document).items():
        for status, answer in op["responses"].items():
            if int(status) < 400:
                continue
            schemas = [c.get("schema") for c in answer.get("content", {}).values()]
            if schemas != [{"$ref": PROBLEM_REF}]:
                inline.append(f"{label} {status}: {schemas}")
    assert inline == []
    # FastAPI's own 422 models are never documented: the 422 is a Problem too.
    assert not {"HTTPValidationError", "ValidationError"} & set(document["components"]["schemas"])


def test_every_request_body_is_a_named_schema() -> None:
    document = _document()
    bodies = {
        label: op["requestBody"]["content"]["application/json"]["schema"]
        for label, op in _operations(document).items()
        if "requestBody" in op
    }
    assert bodies, "no request bodies documented"
    for label, schema in bodies.items():
        name = schema.get("$ref", "").removeprefix("#/components/schemas/")
        assert name in document["components"]["schemas"], f"{label}: {schema}"


def _generator() -> Path:
    """openapi-python-client in its own venv (scripts/install_sdk_generator, run by
    scripts/test): its typer and httpx caps stay out of the project's venv."""
    venv = Path(os.environ.get("JOBWARDEN_SDKGEN_VENV", REPO / ".venv-sdkgen"))
    binary = venv / "bin" / "openapi-python-client"
    assert binary.exists(), f"{binary} is missing: run scripts/install_sdk_generator"
    return binary


def _generate(document: dict[str, Any], where: Path) -> Path:
    """The client openapi-python-client makes of ``document``; its package folder."""
    spec = where / "openapi.json"
    spec.write_text(json.dumps(document), encoding="utf-8")
    config = where / "config.json"
    # No post hooks (they would run ruff on the output); results stream as bytes, whatever
    # the stored media type ("*/*"), as an SDK user would configure it.
    config.write_text(
        json.dumps(
            {
                "post_hooks": [],
                "content_type_overrides": {"*/*": "application/octet-stream"},
            }
        ),
        encoding="utf-8",
    )
    out = where / PACKAGE  # --meta none: the output folder is the package itself
    generated = subprocess.run(
        [
            str(_generator()),
            "generate",
            "--path",
            str(spec),
            "--config",
            str(config),
            "--meta",
            "none",
            "--output-path",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert generated.returncode == 0, generated.stdout + generated.stderr
    # A warning means a piece of the document was left out of the client.
    assert "Warning" not in generated.stdout + generated.stderr, generated.stdout
    return out


def test_a_generated_client_has_one_method_per_operation_and_one_error_model(
    tmp_path: Path, database_url: str
) -> None:
    out = _generate(_document(), tmp_path)
    methods = sorted(p.stem for p in (out / "api").rglob("*.py") if p.stem != "__init__")
    print("generated client's methods:", " ".join(methods))
    assert methods == sorted(OPERATION_IDS.values())
    models = sorted(p.stem for p in (out / "models").glob("*.py") if p.stem != "__init__")
    # One error model: the Problem; no per-route copies (``..._response_404``).
    problem_shaped = [
        m
        for m in models
        if all(
            f"    {field}" in (out / "models" / f"{m}.py").read_text(encoding="utf-8")
            for field in ("type_: str", "title: str", "status: int", "detail: str")
        )
    ]
    assert problem_shaped == ["problem"], problem_shaped
    assert [m for m in models if "_response_" in m] == []
    # The client works: an unknown operation answers the Problem model, 404.
    tenant = tenant_name()
    token = make_token(database_url, tenant, "sdk", ["read"])["Authorization"].split()[1]
    sys.path.insert(0, str(tmp_path))
    try:
        client_module = importlib.import_module(f"{PACKAGE}.client")
        get_operation = importlib.import_module(f"{PACKAGE}.api.operations.get_operation")
        problem_module = importlib.import_module(f"{PACKAGE}.models.problem")
        with serving(create_app()) as url:
            client = client_module.AuthenticatedClient(base_url=url, token=token)
            with client as session:
                answer = get_operation.sync(operation_id=uuid.uuid4(), client=session)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(f"{PACKAGE}.")]:
            del sys.modules[name]
    assert isinstance(answer, problem_module.Problem)
    assert (answer.status, answer.type_) == (404, "tag:jobwarden.dev,2026:problem/not_found")


@pytest.fixture(scope="module")
def docs_url() -> Any:
    with serving(create_app()) as url:
        yield url


def test_docs_page_loads_swagger_ui_from_the_package_not_a_cdn(docs_url: str) -> None:
    page = httpx.get(f"{docs_url}/docs", timeout=10)
    assert page.status_code == 200
    assert "https://" not in page.text and "http://" not in page.text
    for asset in ASSETS:
        assert f'"{ASSETS_PATH}/{asset}"' in page.text
        served = httpx.get(f"{docs_url}{ASSETS_PATH}/{asset}", timeout=10)
        assert served.status_code == 200 and served.content, asset
    # Swagger UI 5: 4.x cannot read the OpenAPI 3.1 document FastAPI writes.
    assert httpx.get(f"{docs_url}/openapi.json", timeout=10).json()["openapi"].startswith("3.1")
    assert assets_dir().name.startswith("swagger-ui-5.")
