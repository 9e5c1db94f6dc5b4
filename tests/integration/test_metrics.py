"""/metrics against the real database: after a known mix of operations, every counter
and gauge of the mix's provider has exactly the expected value.

Operations are written through the store with a hand-made history, so each figure
(early requests, detection delay, step duration, provider answers) has one event that
makes it so. Each test uses a provider name of its own: other tests' rows never change
its figures; a test that reads the unlabelled figures (sweeper lag, early requests) has
a freshly migrated database of its own.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from jobwarden.demo.harness import REPO
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from jobwarden.observability.metrics import STEP_BUCKETS, PostgresCollector, collect_families
from jobwarden.tasks.provider.webhooks import count_refusal
from tests.api_server import serving
from tests.integration.factories import insert_opened, opened_in, with_history

NOW = datetime.now(UTC).replace(microsecond=0)
# scripts/install_promtool puts promtool (from Debian's prometheus package) in the venv.
PROMTOOL = next(
    (str(p) for p in (Path(sys.executable).parent / "promtool",) if p.is_file()),
    shutil.which("promtool"),
)
T0 = NOW - timedelta(hours=1)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _event(kind: EventKind, seconds: float, **fields: Any) -> EventDraft:
    return EventDraft(kind=kind, actor="worker", at=_at(seconds), **fields)


def _wait(seconds: float, until: float, source: str) -> EventDraft:
    return _event(
        EventKind.decision,
        seconds,
        delay_source=source,
        excerpt={"next_poll_at": _at(until).isoformat(), "delay_seconds": until - seconds},
    )


def _insert(
    url: str, provider: str, state: S, events: Sequence[EventDraft], **overrides: Any
) -> uuid.UUID:
    """An operation with the history ``events`` spell out after its intent at T0."""
    values: dict[str, Any] = dict(
        tenant="metrics",
        provider=provider,
        command={},
        created_at=T0,
        create_deadline=T0 + timedelta(minutes=5),
        result_deadline=NOW + timedelta(hours=1),
        max_status_requests=10,
        max_transport_failures=3,
        next_poll_at=None,
        dispatched_at=None,
        create_attempts=0 if state is S.awaiting_approval else 1,
    )
    values.update(overrides)
    row = opened_in(state, at=NOW, **values)
    intent = _event(EventKind.intent_recorded, 0, to_state=S.create_pending.value)
    with transaction(url) as session:
        return insert_opened(session, *with_history(row, [intent, *events])).operation_id


def _accepted(seconds: float) -> EventDraft:
    return _event(
        EventKind.create_accepted,
        seconds,
        from_state=S.create_pending.value,
        to_state=S.accepted.value,
        http_status=202,
    )


def _known_mix(url: str, provider: str) -> None:
    # Succeeded: waited out a Retry-After (10 s), polled at it, pending; the end seen 14 s
    # after the last pending answer.
    _insert(
        url,
        provider,
        S.succeeded,
        [
            _accepted(1),
            _wait(1, 10, "provider_retry_after"),
            _event(EventKind.poll_sent, 10, excerpt={"request": 1, "of": 10}),
            _event(EventKind.observed, 10.5, http_status=200, excerpt={"remote_state": "run"}),
            _wait(11, 20, "local_backoff"),
            _event(
                EventKind.polled,
                20,
                http_status=200,
                excerpt={"request": 2, "of": 10, "step": "poll", "step_seconds": 0.02},
            ),
            _event(
                EventKind.observed,
                34,
                from_state=S.observing.value,
                to_state=S.result_collecting.value,
                excerpt={"request": 3, "of": 10},
            ),
            _event(
                EventKind.result_collected,
                35,
                to_state=S.succeeded.value,
                excerpt={"step": "collect", "step_seconds": 1.5},
            ),
        ],
        status_requests_used=3,
    )
    # Escalated 300 s ago; one status request left 30 s before the Retry-After's end.
    _insert(
        url,
        provider,
        S.escalated,
        [
            _accepted(1),
            _wait(1, 60, "provider_retry_after"),
            _event(EventKind.poll_sent, 31, excerpt={"request": 1, "of": 10}),
            # Answers of every other class: rate limited, a server error, none at all.
            _event(EventKind.observed, 32, http_status=429),
            _event(EventKind.observed, 33, http_status=503),
            _event(EventKind.observed, 34, excerpt={"transport_failure": "read_timeout"}),
            _event(EventKind.escalated, 40, to_state=S.escalated.value),
        ],
        escalation_reason="request_budget_exhausted",
        status_requests_used=10,
        create_attempts=2,
        updated_at=NOW - timedelta(seconds=300),
    )
    # Escalated 100 s ago: the newer of the two waiting escalations.
    _insert(
        url,
        provider,
        S.escalated,
        [_accepted(1), _event(EventKind.escalated, 2, to_state=S.escalated.value)],
        escalation_reason="rate_limited",
        updated_at=NOW - timedelta(seconds=100),
    )
    # Observing with a reserved request not yet sent (2 counted, 1 sent); due 42 s ago.
    _insert(
        url,
        provider,
        S.observing,
        [_accepted(1), _event(EventKind.poll_sent, 5, excerpt={"request": 1, "of": 10})],
        status_requests_used=2,
        reserved_request=2,
        next_poll_at=NOW - timedelta(seconds=42),
    )
    # Awaiting approval: nothing sent, not an escalation.
    _insert(url, provider, S.awaiting_approval, [])
    # Failed: a webhook 45 s after the last pending answer, the end read 3 s after it.
    _insert(
        url,
        provider,
        S.failed,
        [
            _accepted(1),
            _event(EventKind.poll_sent, 4, excerpt={"request": 1, "of": 10}),
            _event(EventKind.observed, 5, http_status=200),
            _wait(5, 600, "local_backoff"),
            # The webhook brings the status read forward: no provider wait stands in its way.
            _event(EventKind.webhook_received, 50),
            _event(EventKind.poll_sent, 51, excerpt={"request": 2, "of": 10}),
            _event(EventKind.observed, 53, from_state=S.observing.value, to_state=S.failed.value),
        ],
        status_requests_used=2,
    )


def _values(families: Sequence[Any], provider: str) -> dict[tuple[str, tuple[str, ...]], float]:
    """Every sample of the provider and every unlabelled one, keyed by sample name and its
    other labels' values."""
    found: dict[tuple[str, tuple[str, ...]], float] = {}
    for family in families:
        for sample in family.samples:
            labels = dict(sample.labels)
            if not labels or labels.pop("provider", None) == provider:
                found[(sample.name, tuple(labels[k] for k in sorted(labels)))] = sample.value
    return found


EXPECTED = {
    ("jobwarden_operations", ("awaiting_approval",)): 1,
    ("jobwarden_operations", ("escalated",)): 2,
    ("jobwarden_operations", ("failed",)): 1,
    ("jobwarden_operations", ("observing",)): 1,
    ("jobwarden_operations", ("succeeded",)): 1,
    ("jobwarden_status_requests_total", ()): 3 + 10 + 0 + 1 + 0 + 2,
    ("jobwarden_create_requests_total", ()): 1 + 2 + 1 + 1 + 0 + 1,
    # Each stopped operation's notification, written with its row (factories: as intake
    # writes an operation), as the stop's own write writes one.
    ("jobwarden_escalations_total", ("rate_limited",)): 1,
    ("jobwarden_escalations_total", ("request_budget_exhausted",)): 1,
    ("jobwarden_escalations_waiting", ("rate_limited",)): 1,
    ("jobwarden_escalations_waiting", ("request_budget_exhausted",)): 1,
    ("jobwarden_oldest_waiting_escalation_age_seconds", ()): 300,
    ("jobwarden_sweeper_lag_seconds", ()): 42,
    ("jobwarden_early_status_requests", ()): 1,
    # Two ends seen: 14 s (polling) and 3 s (after a webhook).
    ("jobwarden_detection_delay_seconds_bucket", ("1.0",)): 0,
    ("jobwarden_detection_delay_seconds_bucket", ("5.0",)): 1,
    ("jobwarden_detection_delay_seconds_bucket", ("15.0",)): 2,
    ("jobwarden_detection_delay_seconds_bucket", ("60.0",)): 2,
    ("jobwarden_detection_delay_seconds_bucket", ("300.0",)): 2,
    ("jobwarden_detection_delay_seconds_bucket", ("900.0",)): 2,
    ("jobwarden_detection_delay_seconds_bucket", ("3600.0",)): 2,
    ("jobwarden_detection_delay_seconds_bucket", ("+Inf",)): 2,
    # A gauge histogram (over a sliding window): _gcount and _gsum, never decreasing
    # counters.
    ("jobwarden_detection_delay_seconds_gcount", ()): 2,
    ("jobwarden_detection_delay_seconds_gsum", ()): 17,
    # One poll step of 0.02 s and one collect step of 1.5 s.
    **{
        ("jobwarden_step_duration_seconds_bucket", (str(b), step)): int(took <= b)
        for b in STEP_BUCKETS
        for step, took in (("poll", 0.02), ("collect", 1.5))
    },
    **{
        (f"jobwarden_step_duration_seconds_{suffix}", (*extra, step)): value
        for step, took in (("poll", 0.02), ("collect", 1.5))
        for suffix, extra, value in (
            ("bucket", ("+Inf",), 1),
            ("gcount", (), 1),
            ("gsum", (), took),
        )
    },
    # Every answer, by class: 5 creates accepted (202) and 3 status answers (200); one 429,
    # one 503, one that never came.
    ("jobwarden_provider_responses_total", ("2xx",)): 8,
    ("jobwarden_provider_responses_total", ("429",)): 1,
    ("jobwarden_provider_responses_total", ("5xx",)): 1,
    ("jobwarden_provider_responses_total", ("none",)): 1,
    # No schedule in this database: the tick is not behind (observability/schedule_metrics.py).
    ("jobwarden_schedule_lag_seconds", ()): 0.0,
}


@pytest.fixture
def fresh_url() -> Iterator[str]:
    """A freshly migrated database of the test's own: the unlabelled figures are its own."""
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade
    from tests.conftest import scratch_database

    with scratch_database("jobwarden_metrics") as url:
        upgrade(url)
        try:
            yield url
        finally:
            dispose_all()


def test_after_a_known_mix_of_operations_every_metric_has_exactly_the_expected_value(
    fresh_url: str,
) -> None:
    provider = f"metrics-{secrets.token_hex(4)}"
    _known_mix(fresh_url, provider)
    assert _values(collect_families(fresh_url, NOW), provider) == EXPECTED


def _settings(url: str) -> Any:
    from jobwarden.config.settings import Settings

    return Settings(database_url=url)


def test_metrics_are_served_as_prometheus_text_read_from_postgres(fresh_url: str) -> None:
    from jobwarden.api.app import create_app

    provider = f"metrics-{secrets.token_hex(4)}"
    _known_mix(fresh_url, provider)
    with serving(create_app(_settings(fresh_url))) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    assert answer.status_code == 200
    # The text exposition format (https://prometheus.io/docs/instrumenting/exposition_formats/).
    assert answer.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    served = _values(list(text_string_to_metric_families(answer.text)), provider)
    # The route's clock is the real one: everything but the two ages is exact.
    ages = {"jobwarden_oldest_waiting_escalation_age_seconds", "jobwarden_sweeper_lag_seconds"}
    assert {k: v for k, v in served.items() if k[0] not in ages} == {
        k: v for k, v in EXPECTED.items() if k[0] not in ages
    }
    assert served[("jobwarden_sweeper_lag_seconds", ())] >= 42


# What Prometheus 2.x/3.x sends (scrape_protocols default): OpenMetrics first.
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
    "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def test_openmetrics_is_served_when_the_scraper_asks_for_it(fresh_url: str) -> None:
    from jobwarden.api.app import create_app

    provider = f"metrics-{secrets.token_hex(4)}"
    _known_mix(fresh_url, provider)
    with serving(create_app(_settings(fresh_url))) as url:
        answer = httpx.get(f"{url}/metrics", headers={"Accept": PROMETHEUS_ACCEPT}, timeout=30)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("application/openmetrics-text; version=1.0.0")
    assert answer.text.endswith("# EOF\n")
    families = list(openmetrics_families(answer.text))  # type: ignore[no-untyped-call]
    # The windowed figures say what they are: gauge histograms, not growing histograms.
    types = {f.name: f.type for f in families}
    assert types["jobwarden_detection_delay_seconds"] == "gaugehistogram"
    assert types["jobwarden_step_duration_seconds"] == "gaugehistogram"
    assert types["jobwarden_provider_responses"] == "counter"
    served = _values(families, provider)
    ages = {"jobwarden_oldest_waiting_escalation_age_seconds", "jobwarden_sweeper_lag_seconds"}
    assert {k: v for k, v in served.items() if k[0] not in ages} == {
        k: v for k, v in EXPECTED.items() if k[0] not in ages
    }


def test_on_an_empty_database_every_unlabelled_series_has_a_sample(fresh_url: str) -> None:
    from jobwarden.api.app import create_app

    with serving(create_app(_settings(fresh_url))) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    families = list(text_string_to_metric_families(answer.text))
    unlabelled = {s.name: s.value for f in families for s in f.samples if not s.labels}
    # Dashboards and alerts over these show 0, not "No data", on a fresh install.
    assert unlabelled == {
        "jobwarden_sweeper_lag_seconds": 0.0,
        "jobwarden_early_status_requests": 0.0,
        "jobwarden_schedule_lag_seconds": 0.0,
    }


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: run scripts/install_promtool")
def test_promtool_finds_nothing_to_complain_about_in_the_exposition_or_the_alerts(
    fresh_url: str, tmp_path: Path
) -> None:
    from jobwarden.api.app import create_app

    assert PROMTOOL is not None
    _known_mix(fresh_url, f"metrics-{secrets.token_hex(4)}")
    with serving(create_app(_settings(fresh_url))) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    # promtool reads the text format; it lints names, units, types and HELP texts.
    checked = subprocess.run(
        [PROMTOOL, "check", "metrics"],
        input=answer.content,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert (checked.returncode, checked.stdout, checked.stderr) == (0, b"", b"")
    rules = subprocess.run(
        [PROMTOOL, "check", "rules", str(REPO / "docs" / "prometheus" / "alerts.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr


def test_refused_webhook_deliveries_counted_in_redis_are_served(fresh_url: str) -> None:
    from redis import Redis

    from jobwarden.api.app import create_app

    settings = _settings(fresh_url)
    provider = f"hooks-{secrets.token_hex(4)}"
    redis = Redis.from_url(settings.redis_url)
    try:
        for reason in ("forged", "forged", "stale", "too_large"):
            count_refusal(redis, settings.key_prefix, provider, reason)
    finally:
        redis.close()
    with serving(create_app(settings)) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    served = _values(list(text_string_to_metric_families(answer.text)), provider)
    refusals = {k: v for k, v in served.items() if k[0] == "jobwarden_webhook_refusals_total"}
    assert refusals == {
        ("jobwarden_webhook_refusals_total", ("forged",)): 2,
        ("jobwarden_webhook_refusals_total", ("stale",)): 1,
        ("jobwarden_webhook_refusals_total", ("too_large",)): 1,
    }


def test_each_tenants_grants_and_waits_at_the_rate_limit_are_served(fresh_url: str) -> None:
    from redis import Redis

    from jobwarden.api.app import create_app
    from jobwarden.models.contracts.contract import RateLimit
    from jobwarden.tasks.provider.rate_limits import shares_key, take_from

    settings = _settings(fresh_url)
    provider = f"limited-{secrets.token_hex(4)}"
    key, limit, t0 = (
        f"{settings.key_prefix}:rate:{provider}:x",
        RateLimit(requests_per_second=10),
        1e9,
    )
    redis = Redis.from_url(settings.redis_url)
    try:
        for tenant in ("acme", "acme", "small"):  # acme granted, then held 0.1 s; small 0.2 s
            counted = (shares_key(settings.key_prefix), provider)
            take_from(redis, key, limit, tenant=tenant, counted=counted, now=t0)
    finally:
        redis.close()
    with serving(create_app(settings)) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    served = _values(list(text_string_to_metric_families(answer.text)), provider)
    assert served[("jobwarden_rate_limit_grants_total", ("acme",))] == 1
    assert served[("jobwarden_rate_limit_grants_total", ("small",))] == 0
    assert served[("jobwarden_rate_limit_wait_seconds_total", ("acme",))] == pytest.approx(0.1)
    assert served[("jobwarden_rate_limit_wait_seconds_total", ("small",))] == pytest.approx(0.2)


def test_a_scrape_within_the_cache_period_reuses_the_last_answer(database_url: str) -> None:
    provider = f"metrics-{secrets.token_hex(4)}"
    clock = [0.0]
    collector = PostgresCollector(
        database_url, cache_seconds=5.0, clock=lambda: NOW, timer=lambda: clock[0]
    )

    def operations() -> float:
        return sum(
            v
            for (name, _), v in _values(list(collector.collect()), provider).items()
            if name == "jobwarden_operations"
        )

    _insert(database_url, provider, S.awaiting_approval, [])
    assert operations() == 1
    _insert(database_url, provider, S.awaiting_approval, [])
    clock[0] = 4.9
    assert operations() == 1  # cached: no query
    clock[0] = 5.0
    assert operations() == 2


def _declare_schedule(url: str, tenant: str) -> None:
    from jobwarden.models.persistence import schedule_store
    from jobwarden.models.schedules.slots import parse_spec

    spec = parse_spec(
        tenant, "nightly", {"cron": "0 2 * * *", "timezone": "UTC", "provider": "sandbox",
        "command": {"kind": "export"}},
        key_limit=200,
    )  # fmt: skip
    with transaction(url) as session:
        schedule_store.declare(session, spec, source="test", actor="pytest", now=NOW)


def _sample_names(database_url: str) -> set[str]:
    from jobwarden.config.settings import get_settings
    from jobwarden.observability.metrics import WebhookRefusalCollector
    from jobwarden.tasks.provider.webhooks import refusal_counts

    provider = f"metrics-{secrets.token_hex(4)}"
    _known_mix(database_url, provider)
    _declare_schedule(database_url, f"metrics-{secrets.token_hex(4)}")
    settings = get_settings()
    refusals = WebhookRefusalCollector(
        settings.redis_url, settings.key_prefix, counts=refusal_counts
    )
    try:
        count_refusal(refusals._redis(), settings.key_prefix, provider, "forged")
        families = [*collect_families(database_url, NOW), *refusals.collect()]
    finally:
        refusals.close()
    return {s.name for f in families for s in f.samples}


def test_the_shipped_alert_rules_parse_and_query_only_metrics_jobwarden_serves(
    database_url: str,
) -> None:
    import yaml

    rules = yaml.safe_load((REPO / "docs" / "prometheus" / "alerts.yml").read_text())
    (group,) = rules["groups"]
    alerts = {r["alert"]: r for r in group["rules"]}
    assert set(alerts) == {
        "JobwardenEscalationsWaiting",
        "JobwardenEarlyStatusRequests",
        "JobwardenSweeperLag",
        "JobwardenNotificationsGivenUp",
        "JobwardenScheduleSlotsMissed",
    }
    # The two a person must act on without knowing the system say how (runbook text).
    for name in ("JobwardenNotificationsGivenUp", "JobwardenScheduleSlotsMissed"):
        assert len(alerts[name]["annotations"].get("runbook", "")) > 200, name
    assert all(set(r) >= {"expr", "labels", "annotations"} for r in alerts.values())
    assert alerts["JobwardenEarlyStatusRequests"]["expr"].endswith("> 0")
    served = _sample_names(database_url)
    for rule in alerts.values():
        assert set(re.findall(r"jobwarden_\w+", rule["expr"])) <= served, rule["expr"]


def test_the_grafana_dashboard_is_valid_json_over_metrics_jobwarden_serves(
    database_url: str,
) -> None:
    dashboard = json.loads((REPO / "docs" / "grafana" / "jobwarden.json").read_text())
    assert dashboard["uid"] == "jobwarden" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"jobwarden_\w+", e)}
    assert used <= _sample_names(database_url)
    # Every family is on the dashboard.
    assert {n.removesuffix("_total") for n in used} >= {
        "jobwarden_operations",
        "jobwarden_escalations_waiting",
        "jobwarden_oldest_waiting_escalation_age_seconds",
        "jobwarden_early_status_requests",
        "jobwarden_sweeper_lag_seconds",
        "jobwarden_status_requests",
        "jobwarden_create_requests",
        "jobwarden_detection_delay_seconds_bucket",
        "jobwarden_step_duration_seconds_bucket",
        "jobwarden_provider_responses",
        "jobwarden_webhook_refusals",
    }


def test_without_postgres_a_scrape_fails_with_a_503_problem_not_zeros(database_url: str) -> None:
    from sqlalchemy.engine import make_url

    from jobwarden.api.app import create_app
    from jobwarden.config.settings import Settings

    gone = make_url(database_url).set(database=f"absent_{secrets.token_hex(4)}")
    settings = Settings(database_url=gone.render_as_string(hide_password=False))
    with serving(create_app(settings)) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    assert answer.status_code == 503
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert answer.json()["down"] == ["postgres"]


def test_escalations_are_counted_by_reason_and_the_count_stays_when_a_human_moves_on(
    database_url: str,
) -> None:
    from jobwarden.models.actions import Decided, Move
    from jobwarden.models.persistence.db import step_session
    from tests.integration.notify_helpers import (
        escalate_on_a_step_connection,
        insert_operation,
        write_on_a_step_connection,
    )

    provider = f"metrics-{secrets.token_hex(4)}"
    at = datetime.now(UTC)
    first = insert_operation(database_url, "metrics", S.observing, at, provider=provider)
    second = insert_operation(database_url, "metrics", S.observing, at, provider=provider)
    escalate_on_a_step_connection(database_url, first, at)
    stopped = escalate_on_a_step_connection(database_url, second, at)
    counted = ("jobwarden_escalations_total", ("rate_limited",))
    waiting = ("jobwarden_escalations_waiting", ("rate_limited",))
    before = _values(collect_families(database_url, at), provider)
    assert (before[counted], before[waiting]) == (2, 2)
    with step_session(database_url) as session:
        op = store.load(session, stopped.operation_id)
    assert op is not None
    gone = Move(
        to=S.abandoned, event=EventKind.decision, cause="a human abandoned it", wake_at=None
    )
    write_on_a_step_connection(database_url, op, Decided(action=gone), at)
    after = _values(collect_families(database_url, at), provider)
    # Waiting is a gauge and drops; the counter of escalations never decreases.
    assert (after[counted], after[waiting]) == (2, 1)


def test_the_api_serves_its_process_figures_labelled_by_pid(fresh_url: str) -> None:
    import os

    from jobwarden.api.app import create_app

    with serving(create_app(_settings(fresh_url))) as url:
        answer = httpx.get(f"{url}/metrics", timeout=30)
    samples = {s.name: s for f in text_string_to_metric_families(answer.text) for s in f.samples}
    # prometheus_client's process and Python figures, of the process that answered (the
    # test serves the app in this one).
    for name in (
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_gc_objects_collected_total",
        "python_info",
    ):
        assert samples[name].labels.get("pid") == str(os.getpid()), name
    assert samples["process_resident_memory_bytes"].value > 0


def test_given_up_notifications_and_missed_slots_have_a_series_from_the_first_scrape(
    fresh_url: str,
) -> None:
    tenant = f"metrics-{secrets.token_hex(4)}"
    _declare_schedule(fresh_url, tenant)
    families = {f.name: f for f in collect_families(fresh_url, NOW)}
    given_up = families["jobwarden_notifications_given_up"]
    assert given_up.type == "counter"
    assert sorted((s.labels["channel"], s.value) for s in given_up.samples) == [
        ("apprise", 0.0),
        ("webhook", 0.0),
    ]
    missed = families["jobwarden_schedule_missed_slots"].samples
    assert [(s.labels, s.value) for s in missed] == [
        ({"tenant": tenant, "schedule": "nightly"}, 0.0)
    ]


def _promtool_case(series: str, values: str, alert: str, fires: dict[str, str]) -> dict[str, Any]:
    """A promtool rule test: the alert fires 6 minutes in (after a first increase at 5) and
    is quiet again once the increase has left its window (at 90 minutes)."""
    return {
        "interval": "1m",
        "input_series": [{"series": series, "values": values}],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": alert, "exp_alerts": []},
            {
                "eval_time": "6m",
                "alertname": alert,
                "exp_alerts": [{"exp_labels": {"severity": "warning", **fires}}],
            },
            {"eval_time": "90m", "alertname": alert, "exp_alerts": []},
        ],
    }


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed: run scripts/install_promtool")
def test_the_given_up_and_missed_slot_alerts_fire_on_the_first_one_and_clear(
    tmp_path: Path,
) -> None:
    import yaml

    assert PROMTOOL is not None
    rules = yaml.safe_load((REPO / "docs" / "prometheus" / "alerts.yml").read_text())
    # promtool compares annotations too; the firing is what this test is about (the
    # runbook text is checked above), so the copy it reads has none.
    for group in rules["groups"]:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "alerts.yml").write_text(yaml.safe_dump(rules))
    tests = {
        "rule_files": ["alerts.yml"],
        "evaluation_interval": "1m",
        "tests": [
            _promtool_case(
                'jobwarden_notifications_given_up_total{channel="webhook"}',
                "0x4 1x100",
                "JobwardenNotificationsGivenUp",
                {"channel": "webhook"},
            ),
            _promtool_case(
                'jobwarden_schedule_missed_slots_total{tenant="acme",schedule="nightly"}',
                "0x4 1x100",
                "JobwardenScheduleSlotsMissed",
                {"tenant": "acme", "schedule": "nightly"},
            ),
        ],
    }
    (tmp_path / "alerts_test.yml").write_text(yaml.safe_dump(tests))
    ran = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
