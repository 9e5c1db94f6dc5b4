"""What a worker records as its actor: its Celery node name, not ``worker:worker`` (issue 36)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery.signals import celeryd_init

from jobwarden.tasks import runtime


@pytest.fixture
def node_reset() -> Iterator[None]:
    before = runtime._worker_node
    yield
    runtime._worker_node = before


@pytest.mark.usefixtures("node_reset")
def test_a_worker_records_its_celery_node_name_unless_a_name_is_configured() -> None:
    # Celery sends celeryd_init with the node name as sender when a process becomes a worker.
    celeryd_init.send(sender="celery@build-7", instance=None, conf=None, options={})
    assert runtime.worker_actor(None, runtime._worker_node) == "worker:celery@build-7"
    # JOBWARDEN_WORKER_NAME still names it when set (the demo harness, packaging test).
    assert runtime.worker_actor("packaged", runtime._worker_node) == "worker:packaged"


def test_outside_a_worker_the_actor_is_plain_worker() -> None:
    assert runtime.worker_actor(None, None) == "worker:worker"
