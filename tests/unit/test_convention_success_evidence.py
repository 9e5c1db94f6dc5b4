"""Property (issue 34): no convention ever records a success without the evidence it needs.

Every convention's create answer and every monitor's poll answer is driven with every
status code x body shape (none, empty, not JSON, not an object, an object without a
state, each terminal state, an unknown state) x monitor headers (absent, absolute,
relative, on a foreign origin). Wherever the decisions lead to ``succeeded`` — a
``Collect`` whose collect step then ends the operation at once — the success must carry
what its convention requires ([ARM] ARM RPC "Asynchronous operations": a PUT/PATCH ends
with the resource; [LRO] Azure REST API Guidelines "Long-running operations": a POST's
result is JSON; RFC 9110 section 15.3.5: only a 204, or a DELETE, ends with no body). A
final result fetched from a URL is judged when it is fetched (a JSON document parsed
whole: ``models/results/validation.py``), so a ``Send`` of that fetch is not a success yet.
"""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.actions import Accept, Collect, ProviderRequest, Succeed
from jobwarden.models.actions import RequestPurpose as P
from jobwarden.models.provider.requests import StepContext, create_request
from jobwarden.models.results.decisions import before_collect
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import after_create, after_poll
from tests.unit.factories import NOW, context, operation, reply

ARM, LRO = context("azure_arm"), context("azure_lro")
ARM_CMD = {
    "subscription": "s",
    "resource_group": "g",
    "namespace": "Microsoft.Foo",
    "type": "widgets",
    "name": "w1",
    "api_version": "2024-01-01",
    "resource": {"properties": {}},
    "operation": "export",
    "parameters": {"format": "csv"},
}
# (context, route label, method, command)
ROUTES: list[tuple[StepContext, str, str, dict[str, Any]]] = [
    (ARM, "arm PUT", "PUT", ARM_CMD),
    (ARM, "arm PATCH", "PATCH", {**ARM_CMD, "action": "update"}),
    (ARM, "arm DELETE", "DELETE", {**ARM_CMD, "action": "delete"}),
    (ARM, "arm POST", "POST", {**ARM_CMD, "action": "resource-action"}),
    (ARM, "arm POST (subscription)", "POST", {**ARM_CMD, "action": "subscription-action"}),
    (LRO, "lro POST", "POST", {"collection": "users", "name": "m", "action": "x", "format": "j"}),
    (LRO, "lro PUT", "PUT", {"operation": "create-or-replace", "collection": "u", "name": "m"}),
    (LRO, "lro DELETE", "DELETE", {"operation": "delete", "collection": "u", "name": "m"}),
]
CODES = (200, 201, 202, 204)
STATES = ("Succeeded", "Failed", "Canceled", "Running", "SomethingNew")
# (label, body, body_problem)
BODIES: list[tuple[str, object, str | None]] = [
    ("none", None, None),
    ("not JSON", None, "malformed_json"),
    ("an array", [{"a": 1}], None),
    ("an object without state", {"id": "/x"}, None),
    *((f"status {s}", {"status": s}, None) for s in STATES),
    *((f"provisioningState {s}", {"properties": {"provisioningState": s}}, None) for s in STATES),
]


def _header_sets(base: str) -> list[dict[str, str]]:
    here, rel, evil = f"{base}/operations/1", "/operations/1", "https://evil.example/op"
    return [
        {},
        {"azure-asyncoperation": here},
        {"operation-location": here},
        {"location": here},
        {"azure-asyncoperation": here, "location": here},
        {"azure-asyncoperation": rel, "location": rel},
        {"operation-location": evil},
        {"azure-asyncoperation": here, "location": evil},
        {"location": evil},
    ]


def _success_problem(ctx: StepContext, method: str, code: int, collect: Collect) -> str | None:
    """Why the success this Collect leads to at once lacks its evidence (None: it has it)."""
    op = operation(
        S.result_collecting,
        provider=ctx.contract.name,
        validation_summary={"expected": collect.expected},
        result_reference=collect.result_ref,
        collect_deadline=NOW + timedelta(hours=1),
    )
    action = before_collect(op, ctx, NOW).action
    if not isinstance(action, Succeed):
        return None  # a fetch (judged when it arrives) or a stop: not a success yet
    if action.content is None:
        if code == 204 or method == "DELETE":
            return None
        return f"succeeded with no result after http_{code} ({collect.expected.get('final_rule')})"
    value = json.loads(action.content)
    inline_pointer = ctx.contract.result is not None and ctx.contract.result.fetch == "inline"
    if method in ("PUT", "PATCH") and not inline_pointer and not isinstance(value, dict):
        return f"a {method} succeeded with {value!r}, not a resource"
    return None


def _create_problems() -> list[str]:
    problems = []
    for (ctx, label, method, command), code, (shape, body, problem) in itertools.product(
        ROUTES, CODES, BODIES
    ):
        for headers in _header_sets(ctx.base_url):
            op = operation(
                S.create_pending, command=command, provider=ctx.contract.name, create_attempts=1
            )
            answer = reply(code, body, headers=headers, body_problem=problem)
            action = after_create(op, ctx, create_request(ctx, op), answer, NOW, 0.5).action
            ending = action.then if isinstance(action, Accept) else action
            if isinstance(ending, Collect):
                found = _success_problem(ctx, method, code, ending)
                if found:
                    problems.append(f"create {label} {code} {shape} {sorted(headers)}: {found}")
    return problems


def _poll_problems() -> list[str]:
    problems = []
    for (ctx, label, method, command), mode, code, (shape, body, problem) in itertools.product(
        ROUTES, ("status_monitor", "location", "resource"), CODES, BODIES
    ):
        url = f"{ctx.base_url}/operations/1?api-version=1"
        for headers in _header_sets(ctx.base_url):
            op = operation(
                S.observing,
                command=command,
                provider=ctx.contract.name,
                status_url=url,
                polling_mode=mode,
                accepted_at=NOW,
                status_requests_used=1,
            )
            request = ProviderRequest(purpose=P.status, method="GET", url=url)
            answer = reply(code, body, headers=headers, body_problem=problem)
            action = after_poll(op, ctx, request, answer, NOW, 0.5).action
            if isinstance(action, Collect):
                found = _success_problem(ctx, method, code, action)
                if found:
                    case = f"{label} via {mode} {code} {shape} {sorted(headers)}"
                    problems.append(f"poll {case}: {found}")
    return problems


def test_no_create_answer_under_any_convention_succeeds_without_its_evidence() -> None:
    problems = _create_problems()
    assert problems == [], f"{len(problems)} cases, e.g.\n" + "\n".join(problems[:25])


def test_no_monitor_answer_under_any_convention_succeeds_without_its_evidence() -> None:
    problems = _poll_problems()
    assert problems == [], f"{len(problems)} cases, e.g.\n" + "\n".join(problems[:25])


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(
    route=st.sampled_from(ROUTES),
    mode=st.sampled_from(("status_monitor", "location", "resource")),
    code=st.sampled_from(CODES),
    body=JSON | st.fixed_dictionaries({"properties": st.fixed_dictionaries({"x": JSON})}),
)
def test_no_arbitrary_json_answer_succeeds_without_its_evidence(
    route: tuple[StepContext, str, str, dict[str, Any]], mode: str, code: int, body: object
) -> None:
    ctx, _, method, command = route
    url = f"{ctx.base_url}/operations/1"
    op = operation(
        S.observing,
        command=command,
        provider=ctx.contract.name,
        status_url=url,
        polling_mode=mode,
        accepted_at=NOW,
        status_requests_used=1,
    )
    request = ProviderRequest(purpose=P.status, method="GET", url=url)
    action = after_poll(op, ctx, request, reply(code, body), NOW, 0.5).action
    if isinstance(action, Collect):
        assert _success_problem(ctx, method, code, action) is None


# The other conventions read a finished job through the contract's pointers: Google
# AIP-151 (``done`` with ``response`` or ``error``), OpenAI Batch (``completed`` with an
# ``output_file_id``) and a plain contract (the sandbox's ``succeeded`` with a result URL).
# Their evidence is the result itself or a reference to fetch; a success with neither is
# a contradiction (``succeeded_without_result``), never ``succeeded``.
OTHERS: list[tuple[StepContext, list[object]]] = [
    (
        context("google_aip151"),
        [{"done": True}, {"done": True, "response": {"x": 1}}, {"done": True, "response": None}],
    ),
    (
        context("openai_batch"),
        [{"status": "completed"}, {"status": "completed", "output_file_id": "file-1"}],
    ),
    (
        context("sandbox"),
        [{"status": "succeeded"}, {"status": "succeeded", "result": {"url": "/v1/r"}}],
    ),
]


def test_no_status_answer_under_the_other_conventions_succeeds_without_its_evidence() -> None:
    problems = []
    for (ctx, finished), code, (_, body, problem) in itertools.product(
        OTHERS, CODES, [*BODIES, *((f"finished {b}", b, None) for b in (*OTHERS[0][1],))]
    ):
        for extra in finished:
            for answer_body in (body, extra):
                op = operation(
                    S.observing,
                    provider=ctx.contract.name,
                    remote_job_id="job-1",
                    status_url=f"{ctx.base_url}/v1/jobs/job-1",
                    accepted_at=NOW,
                    status_requests_used=1,
                )
                url = op.status_url or ""
                request = ProviderRequest(purpose=P.status, method="GET", url=url)
                answer = reply(code, answer_body, body_problem=problem)
                action = after_poll(op, ctx, request, answer, NOW, 0.5).action
                if not isinstance(action, Collect):
                    continue
                collecting = operation(
                    S.result_collecting,
                    provider=ctx.contract.name,
                    remote_job_id="job-1",
                    validation_summary={"expected": action.expected},
                    result_reference=action.result_ref,
                    collect_deadline=NOW + timedelta(hours=1),
                )
                done = before_collect(collecting, ctx, NOW).action
                if isinstance(done, Succeed) and done.content is None:
                    problems.append(f"{ctx.contract.name} {code} {answer_body!r}: {done.note}")
    assert problems == [], "\n".join(problems[:25])
