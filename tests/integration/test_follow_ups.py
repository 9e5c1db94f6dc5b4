"""Follow-up operations (issue 40) against the real Postgres and Redis: a capture at most
once per payment intent, refunds whose amounts never exceed what the capture took (also
when two race for the remainder), refusals naming the parent's state or what remains,
both links (the child's row and intent event, the parent's history), and every door's
spelling of the same refusal.
"""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

import jobwarden
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.intake.follow_ups import (
    AmountLimitError,
    FollowUpNotAllowedError,
    ParentStateError,
)
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import ResultRow
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.follow_ups import follow_up_from_message
from jobwarden.tasks.intake import SubmitOutcome
from tests.api_server import serving
from tests.integration.api_helpers import NOW, insert_operation, load, make_token, tenant_name

INTENT = {"kind": "payment_intent", "amount": 1000, "currency": "EUR"}
CAPTURE = {"kind": "capture", "amount": 1000, "currency": "EUR"}
TYPE = "tag:jobwarden.dev,2026:problem/"


def _refund(amount: int) -> dict[str, Any]:
    return {"kind": "refund", "amount": amount, "currency": "EUR"}


def _intent(database_url: str, tenant: str, state: S = S.succeeded) -> uuid.UUID:
    return insert_operation(
        database_url, tenant, state, provider="sandbox_payments", command=INTENT
    )


def _capture(database_url: str, tenant: str, captured: int = 1000) -> uuid.UUID:
    """A succeeded capture whose collected result says the provider took ``captured``."""
    op = insert_operation(
        database_url, tenant, S.succeeded, provider="sandbox_capture", command=CAPTURE
    )
    document = json.dumps({"object": "capture", "amount": captured, "currency": "EUR"}).encode()
    with transaction(database_url) as session:
        session.add(
            ResultRow(
                operation_id=op,
                content=document,
                content_type="application/json",
                sha256=hashlib.sha256(document).hexdigest(),
                size_bytes=len(document),
                collected_at=NOW,
            )
        )
    return op


def _events(database_url: str, op: uuid.UUID) -> list[Any]:
    with transaction(database_url) as session:
        return [e.draft for e in store.events_for(session, op)]


def test_a_capture_is_a_new_operation_linked_both_ways(database_url: str) -> None:
    tenant = tenant_name()
    parent = _intent(database_url, tenant)
    answer = jobwarden.follow_up(parent, "capture", CAPTURE, "alice")
    assert answer.outcome is SubmitOutcome.created
    assert answer.operation_id is not None
    child = load(database_url, uuid.UUID(answer.operation_id))
    # Its own operation: own id, token, fingerprint; its own contract, the parent's tenant.
    assert child.operation_id != parent
    assert child.provider == "sandbox_capture"
    assert child.tenant == tenant
    assert child.provider_token != load(database_url, parent).provider_token
    assert (child.follows, child.follow_up_kind) == (parent, "capture")
    assert child.idempotency_key == f"follow-up:{parent}:capture"
    # The link is in its hash-chained intent event, and the parent's history names it.
    (intent, *_) = _events(database_url, child.operation_id)
    assert intent.kind is EventKind.intent_recorded
    assert intent.excerpt["follows"] == str(parent)
    assert intent.excerpt["follow_up_kind"] == "capture"
    started = [e for e in _events(database_url, parent) if e.kind is EventKind.follow_up_started]
    assert [e.excerpt["follow_up"] for e in started] == [answer.operation_id]
    assert started[0].actor == "submitter:alice"
    assert jobwarden.options is not None  # the public API still loads beside it


def test_a_second_capture_is_the_same_operation(database_url: str) -> None:
    parent = _intent(database_url, tenant_name())
    first = jobwarden.follow_up(parent, "capture", CAPTURE, "alice")
    again = jobwarden.follow_up(parent, "capture", CAPTURE, "bob")
    assert again.outcome is SubmitOutcome.replayed
    assert again.operation_id == first.operation_id
    other = jobwarden.follow_up(parent, "capture", {**CAPTURE, "amount": 900}, "alice")
    assert other.outcome is SubmitOutcome.conflict
    assert other.operation_id == first.operation_id
    # Recorded once in the parent's history, however often it was asked for.
    started = [e for e in _events(database_url, parent) if e.kind is EventKind.follow_up_started]
    assert len(started) == 1
    with pytest.raises(jobwarden.InvalidSubmissionError, match="instruction_id"):
        jobwarden.follow_up(parent, "capture", CAPTURE, "alice", instruction_id="again")


@pytest.mark.parametrize("state", [S.observing, S.create_pending, S.failed])
def test_a_capture_before_the_intent_succeeded_is_refused(database_url: str, state: S) -> None:
    parent = _intent(database_url, tenant_name(), state)
    with pytest.raises(ParentStateError) as refused:
        jobwarden.follow_up(parent, "capture", CAPTURE, "alice")
    assert refused.value.state == state.value
    assert refused.value.required == "succeeded"
    assert f"is {state.value}" in str(refused.value)
    assert "only an operation that is succeeded" in str(refused.value)


def test_an_undeclared_kind_is_refused_naming_the_declared_ones(database_url: str) -> None:
    parent = _intent(database_url, tenant_name())
    with pytest.raises(FollowUpNotAllowedError, match=r"allows no follow-up 'refund' \(allowed"):
        jobwarden.follow_up(parent, "refund", _refund(10), "alice", instruction_id="r1")


def test_refunds_never_exceed_what_the_capture_took(database_url: str) -> None:
    tenant = tenant_name()
    capture = _capture(database_url, tenant, captured=1000)
    made = [
        jobwarden.follow_up(capture, "refund", _refund(300), "alice", instruction_id=f"r{n}")
        for n in (1, 2, 3)
    ]
    assert [m.outcome for m in made] == [SubmitOutcome.created] * 3
    assert len({m.operation_id for m in made}) == 3
    with pytest.raises(AmountLimitError) as refused:
        jobwarden.follow_up(capture, "refund", _refund(200), "alice", instruction_id="r4")
    assert (refused.value.remaining, refused.value.limit, refused.value.already) == (100, 1000, 900)
    assert "remaining 100" in str(refused.value)
    # The same instruction again is the same refund, not a fourth charge on the limit.
    again = jobwarden.follow_up(capture, "refund", _refund(300), "alice", instruction_id="r1")
    assert again.outcome is SubmitOutcome.replayed
    # A refund the provider failed no longer counts: its amount is free again.
    failed = uuid.UUID(str(made[0].operation_id))
    with transaction(database_url) as session:
        row = store.load(session, failed)
        assert row is not None
        ended = EventDraft(
            kind=EventKind.create_refused,
            actor="worker",
            at=row.updated_at,
            from_state=row.state.value,
            to_state=S.failed.value,
            cause="the provider refused the refund",
        )
        store.fenced_update(
            session, row, changes={"state": S.failed}, drafts=[ended], now=row.updated_at
        )
    fits = jobwarden.follow_up(capture, "refund", _refund(400), "alice", instruction_id="r5")
    assert fits.outcome is SubmitOutcome.created
    # The refusal is on the intake log with the rest of the door's answers.
    with transaction(database_url) as session:
        refusals = (
            session.execute(
                text("SELECT outcome FROM intake_log WHERE tenant = :t AND idempotency_key = :k"),
                {"t": tenant, "k": f"follow-up:{capture}:refund:r4"},
            )
            .scalars()
            .all()
        )
    assert refusals == ["invalid"]


def test_a_refund_names_its_own_instruction_and_a_whole_amount(database_url: str) -> None:
    capture = _capture(database_url, tenant_name())
    with pytest.raises(jobwarden.InvalidSubmissionError, match="instruction_id"):
        jobwarden.follow_up(capture, "refund", _refund(10), "alice")
    with pytest.raises(jobwarden.InvalidSubmissionError, match=r"command\.amount"):
        jobwarden.follow_up(
            capture, "refund", {**_refund(10), "amount": 10.5}, "alice", instruction_id="x"
        )


ROUNDS = 4


def _race(capture: uuid.UUID, round_: int) -> dict[int, object]:
    """Two refunds of 600 started at once, each on its own thread and connection."""
    barrier = threading.Barrier(2, timeout=30)
    answers: dict[int, object] = {}

    def refund(n: int) -> None:
        barrier.wait()
        try:
            answers[n] = jobwarden.follow_up(
                capture, "refund", _refund(600), f"racer-{n}", instruction_id=f"race-{n}"
            )
        except AmountLimitError as exc:
            answers[n] = exc

    threads = [threading.Thread(target=refund, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive(), f"round {round_}: a refund never returned"
    return answers


def test_two_concurrent_refunds_over_the_remainder_exactly_one_is_accepted(
    database_url: str,
) -> None:
    """Two threads, each its own connection, race for the same remainder: 600 + 600 of 1000.
    Synchronised by a barrier (never a sleep), every wait bounded; several rounds, so a
    check outside the parent's lock would let both through in at least one."""
    tenant = tenant_name()
    for round_ in range(ROUNDS):
        capture = _capture(database_url, tenant, captured=1000)
        answers = _race(capture, round_)
        accepted = [a for a in answers.values() if not isinstance(a, AmountLimitError)]
        refused = [a for a in answers.values() if isinstance(a, AmountLimitError)]
        assert len(accepted) == 1 and len(refused) == 1, (round_, answers)
        assert refused[0].remaining == 400
        with transaction(database_url) as session:
            total = session.execute(
                text(
                    "SELECT coalesce(sum(follow_up_amount), 0) FROM operations WHERE follows = :p"
                ),
                {"p": capture},
            ).scalar_one()
        assert total == 600


def test_the_celery_door_answers_a_refusal_as_invalid(database_url: str) -> None:
    capture = _capture(database_url, tenant_name(), captured=100)
    answer = follow_up_from_message(
        {
            "parent_id": str(capture),
            "kind": "refund",
            "command": _refund(150),
            "requested_by": "svc",
            "instruction_id": "c1",
        }
    )
    assert answer["outcome"] == "invalid"
    assert "remaining 100" in answer["error"]
    ok = follow_up_from_message(
        {
            "parent_id": str(capture),
            "kind": "refund",
            "command": _refund(100),
            "requested_by": "svc",
            "instruction_id": "c2",
        }
    )
    assert (ok["outcome"], ok["follows"], ok["follow_up_kind"]) == (
        "created",
        str(capture),
        "refund",
    )
    assert follow_up_from_message({"parent_id": str(capture)})["outcome"] == "invalid"


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    from jobwarden.api.app import create_app

    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _auth(database_url: str, tenant: str, *scopes: str) -> dict[str, str]:
    return make_token(database_url, tenant, "ops", list(scopes))


def test_http_starts_follow_ups_and_answers_refusals_as_problems(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    headers = _auth(database_url, tenant, "submit", "read")
    capture = _capture(database_url, tenant, captured=500)
    path = f"/v1/operations/{capture}/follow-ups"
    made = client.post(
        path,
        json={"kind": "refund", "command": _refund(400), "instruction_id": "h1"},
        headers=headers,
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert (body["outcome"], body["follows"], body["follow_up_kind"]) == (
        "created",
        str(capture),
        "refund",
    )
    over = client.post(
        path,
        json={"kind": "refund", "command": _refund(200), "instruction_id": "h2"},
        headers=headers,
    )
    assert over.status_code == 409, over.text
    problem = over.json()
    assert problem["type"] == TYPE + "amount_limit_exceeded"
    assert problem["remaining"] == 100
    assert "remaining 100" in problem["detail"]
    # The family: the parent lists its refund and the amount so far against the limit.
    view = client.get(f"/v1/operations/{capture}", headers=headers).json()
    assert [f["operation_id"] for f in view["follow_ups"]] == [body["operation_id"]]
    assert view["follow_up_amounts"]["refund"] == {
        "requested": 400,
        "limit": 500,
        "limit_field": "result.amount",
        "remaining": 100,
    }
    child = client.get(f"/v1/operations/{body['operation_id']}", headers=headers).json()
    assert child["follows"] == {"operation_id": str(capture), "kind": "refund", "amount": 400}
    # A parent in the wrong state: 409 naming its state and the required ones.
    running = _intent(database_url, tenant, S.observing)
    early = client.post(
        f"/v1/operations/{running}/follow-ups",
        json={"kind": "capture", "command": CAPTURE},
        headers=headers,
    )
    assert early.status_code == 409, early.text
    assert early.json()["type"] == TYPE + "follow_up_not_allowed"
    assert early.json()["parent_state"] == "observing"
    assert early.json()["required_states"] == ["succeeded"]
    # Another tenant's operation is not found, exactly as one that does not exist.
    stranger = _auth(database_url, tenant_name(), "submit")
    hidden = client.post(
        path,
        json={"kind": "refund", "command": _refund(1), "instruction_id": "s1"},
        headers=stranger,
    )
    assert hidden.status_code == 404, hidden.text


def test_a_parent_whose_provider_is_gone_is_a_refusal_not_a_500(
    database_url: str, client: httpx.Client
) -> None:
    # An operation from before contracts were pinned, whose provider is no longer
    # configured: nothing declares its follow-ups, and the answer says so.
    tenant = tenant_name()
    orphan = insert_operation(database_url, tenant, S.succeeded, provider="retired_provider")
    answer = client.post(
        f"/v1/operations/{orphan}/follow-ups",
        json={"kind": "capture", "command": CAPTURE},
        headers=_auth(database_url, tenant, "submit", "read"),
    )
    assert answer.status_code == 422, answer.text
    assert "'retired_provider' is not configured" in answer.json()["detail"]


def test_the_cli_starts_a_refund_and_show_tells_the_family(database_url: str) -> None:
    from tests.integration.test_cli import _cli

    tenant = tenant_name()
    capture = _capture(database_url, tenant, captured=800)
    started = _cli(
        "follow-up", str(capture), "refund", json.dumps(_refund(300)), "--instruction-id", "c1"
    )
    assert started.returncode == 0, started.stderr
    answer = json.loads(started.stdout)
    assert (answer["outcome"], answer["follows"]) == ("created", str(capture))
    over = _cli(
        "follow-up", str(capture), "refund", json.dumps(_refund(600)), "--instruction-id", "c2"
    )
    assert over.returncode == 2
    assert "remaining 500" in over.stderr
    shown = _cli("show", str(capture))
    assert shown.returncode == 0, shown.stderr
    assert f"follow-up        refund    {answer['operation_id']}" in shown.stdout
    assert "refund so far    300 of 800 (result.amount), remaining 500" in shown.stdout
    child = _cli("show", answer["operation_id"], "--json")
    assert json.loads(child.stdout)["follows"] == {"operation_id": str(capture), "kind": "refund"}


def test_the_console_shows_the_family_and_starts_a_refund(database_url: str) -> None:
    from jobwarden.console.app import create_app
    from tests.integration.matrix.doors import csrf

    tenant = tenant_name()
    capture = _capture(database_url, tenant, captured=700)
    secret = make_token(database_url, tenant, "ops", ["submit", "read"])["Authorization"]
    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        form = http.get("/console/login")
        token = secret.removeprefix("Bearer ")
        login = http.post("/console/login", data={"csrf": csrf(form.text), "token": token})
        assert login.status_code == 303, login.text
        page = http.get(f"/console/operations/{capture}")
        assert 'id="start-follow-up"' in page.text
        started = http.post(
            f"/console/operations/{capture}/follow-ups",
            data={
                "csrf": csrf(page.text),
                "kind": "refund",
                "instruction_id": "console-1",
                "command": json.dumps(_refund(250)),
            },
        )
        assert started.status_code == 303, started.text
        child = started.headers["location"].split("/")[-1].split("?")[0]
        child_page = http.get(f"/console/operations/{child}")
        assert f'href="/console/operations/{capture}">{capture}</a> as refund' in child_page.text
        family = http.get(f"/console/operations/{capture}")
        assert f'data-follow-up="{child}"' in family.text
        assert "refund so far: 250 of 700 (result.amount), remaining 450" in family.text
        over = http.post(
            f"/console/operations/{capture}/follow-ups",
            data={
                "csrf": csrf(family.text),
                "kind": "refund",
                "instruction_id": "console-2",
                "command": json.dumps(_refund(500)),
            },
        )
        assert over.status_code == 409
        assert "remaining 450" in over.text


def test_receipts_carry_the_link_both_ways_and_an_edited_link_is_named(
    database_url: str,
) -> None:
    from datetime import UTC, datetime

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )
    from pydantic import SecretStr

    from jobwarden.config.settings import Settings
    from jobwarden.models.history.receipts import signed, verify_receipt
    from jobwarden.tasks.receipts import receipt_of

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()).decode()
    settings = Settings(receipt_signing_key=SecretStr(pem))
    parent = _intent(database_url, tenant_name())
    child = jobwarden.follow_up(parent, "capture", CAPTURE, "alice").operation_id
    assert child is not None
    now = datetime.now(UTC)
    theirs = receipt_of(settings, None, parent, now=now)
    ours = receipt_of(settings, None, uuid.UUID(child), now=now)
    assert theirs is not None and ours is not None
    assert ours["facts"]["follows"] == {"operation_id": str(parent), "kind": "capture"}
    (listed,) = theirs["facts"]["follow_ups"]
    assert (listed["operation_id"], listed["kind"]) == (child, "capture")
    assert verify_receipt(ours, key.public_key()) == []
    assert verify_receipt(theirs, key.public_key()) == []
    ours["facts"]["follows"]["kind"] = "refund"
    problems = [p.line() for p in verify_receipt(signed(ours, key), key.public_key())]
    assert any("fact follows.kind" in line for line in problems), problems


def test_the_mcp_tool_starts_a_refund_and_names_what_remains(database_url: str) -> None:
    import anyio
    from mcp import Client

    from jobwarden.config.settings import Settings
    from jobwarden.mcp.server import build_server
    from tests.integration.matrix.doors import tool_answer, tool_error

    tenant = tenant_name()
    capture = _capture(database_url, tenant, captured=300)
    secret = make_token(database_url, tenant, "agent", ["submit", "read"])["Authorization"]
    settings = Settings(database_url=database_url)

    def call(amount: int, instruction: str) -> Any:
        arguments = {
            "operation_id": str(capture),
            "kind": "refund",
            "command": _refund(amount),
            "instruction_id": instruction,
        }

        async def session() -> Any:
            with anyio.fail_after(30):
                server = build_server(settings, stdio_token=secret.removeprefix("Bearer "))
                async with Client(server) as client:
                    return await client.call_tool("start_follow_up_operation", arguments)

        return anyio.run(session)

    made = tool_answer(call(200, "m1"))
    assert (made["outcome"], made["follows"], made["follow_up_kind"]) == (
        "created",
        str(capture),
        "refund",
    )
    refused = tool_error(call(200, "m2"))
    assert "amount_limit_exceeded: amount: 200 exceeds" in refused
    assert "remaining 100" in refused
