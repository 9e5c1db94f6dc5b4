"""What real workers did reaches /metrics through the history (jobwarden.observability.metrics).

Workers are other processes; the API serves the figures. Each step write carries the
step's name and duration on its last event, and each provider answer is one event with
its status: /metrics reads both from Postgres, so no figure depends on which process
did the work.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from prometheus_client.core import Metric

from jobwarden.observability.metrics import collect_families
from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")


def _sample(families: list[Metric], name: str, **labels: str) -> float:
    for family in families:
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def test_every_step_a_worker_wrote_is_timed_in_the_history_and_served_as_a_figure(
    pipeline: Pipeline,
) -> None:
    before = collect_families(pipeline.database_url, datetime.now(UTC))
    op = pipeline.submit({"polls_to_finish": 3})
    assert pipeline.wait_state(op).state == "succeeded"
    timed = [
        (e.draft.excerpt["step"], e.draft.excerpt["step_seconds"])
        for e in pipeline.events(op)
        if e.draft.excerpt and "step_seconds" in e.draft.excerpt
    ]
    steps = [name for name, _ in timed]
    # One timing per step write: the create, each poll, the collection.
    assert steps[0] == "create" and steps.count("poll") == 3 and steps[-1] == "collect"
    assert all(0 < seconds < 30 for _, seconds in timed)
    after = collect_families(pipeline.database_url, datetime.now(UTC))
    count = "jobwarden_step_duration_seconds_gcount"
    # Other tests' operations share the database: this one added at least its own steps.
    assert _sample(after, count, provider="sandbox", step="poll") >= 3
    answers = "jobwarden_provider_responses_total"
    grown = _sample(after, answers, provider="sandbox", status_class="2xx") - _sample(
        before, answers, provider="sandbox", status_class="2xx"
    )
    # The create (202), three status answers and the result download, at least.
    assert grown >= 5
