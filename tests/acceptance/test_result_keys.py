"""Wake-up messages leave no result keys in Redis: the row is the answer, not the task."""

from __future__ import annotations

import json
import os

import pytest

from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")


def test_a_whole_pipeline_run_stores_no_step_result_in_redis(
    pipeline: Pipeline, redis_client: object
) -> None:
    op = pipeline.submit({"polls_to_finish": 2})
    assert pipeline.wait_state(op).state == "succeeded"
    prefix = os.environ["JOBWARDEN_KEY_PREFIX"]
    keys = list(redis_client.scan_iter(match=f"{prefix}:celery:celery-task-meta-*"))  # type: ignore[attr-defined]
    step_results = []
    for key in keys:
        raw = redis_client.get(key)  # type: ignore[attr-defined]
        meta = json.loads(raw) if raw else {}
        # Only jobwarden.submit answers with a value (a dict); a step answers with a state.
        if isinstance(meta.get("result"), str) or meta.get("result") is None:
            step_results.append(key)
    assert step_results == []
