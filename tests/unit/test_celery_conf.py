"""The Celery app's cost switches: task events off unless Flower asks for them, and no
result for any pipeline message but the intake's answer (issue 12, item 4)."""

from __future__ import annotations

from pathlib import Path

import yaml

from jobwarden.config.celery_app import app

REPO = Path(__file__).resolve().parents[2]


def test_workers_send_no_task_events_unless_a_monitor_enables_them() -> None:
    # Events cost the worker's main process ~2.85 ms per poll (issue 12); Flower turns
    # them on with its periodic enable_events broadcast, so monitoring still works.
    assert app.conf.worker_send_task_events is False
    assert app.conf.task_send_sent_event is False


def test_every_pipeline_task_ignores_its_result_and_only_the_intake_tasks_keep_one() -> None:
    import jobwarden.tasks.pipeline  # noqa: F401 - registers the tasks on the app

    ours = {name: task for name, task in app.tasks.items() if name.startswith("jobwarden.")}
    keeping = sorted(name for name, task in ours.items() if not task.ignore_result)
    # A submission's and a follow-up's answer is the task's result (created, conflict ...).
    assert keeping == ["jobwarden.follow_up", "jobwarden.submit"]
    assert {"jobwarden.poll", "jobwarden.sweep", "jobwarden.create"} <= set(ours)


def test_beat_publishes_the_sweep_without_a_result_subscription() -> None:
    options = app.conf.beat_schedule["jobwarden-sweep"]["options"]
    assert options["ignore_result"] is True


def test_the_shipped_flower_enables_events_on_the_workers_it_watches() -> None:
    # Flower 2.2's enable_events option (default on) broadcasts enable_events to every
    # worker every 5 s (flower/events.py, on_enable_events); the compose file says so.
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    entrypoint = compose["services"]["flower"]["entrypoint"]
    assert "--enable_events=True" in entrypoint
    worker = " ".join(str(part) for part in compose["services"]["worker"].get("entrypoint", []))
    command = " ".join(str(part) for part in compose["services"]["worker"].get("command", []) or [])
    assert " -E" not in f" {worker} {command}" and "--task-events" not in f"{worker} {command}"


def test_beat_rings_the_history_maintenance_once_a_day_without_a_result() -> None:
    # tasks/history_archive.py: partitions made two months ahead, so a daily run has slack.
    entry = app.conf.beat_schedule["jobwarden-history"]
    assert (entry["task"], entry["schedule"]) == ("jobwarden.history", 86400.0)
    assert entry["options"]["ignore_result"] is True


def test_beat_folds_the_metrics_deltas_with_a_task_the_workers_know() -> None:
    # Without the fold the deltas the /metrics counters append grow with the history, and
    # every scrape adds them all up (tasks/metrics_tallies.py).
    from jobwarden.config.settings import get_settings

    entry = app.conf.beat_schedule["jobwarden-fold-tallies"]
    assert entry["task"] == "jobwarden.fold_tallies"
    assert entry["schedule"] == get_settings().tally_fold_interval_seconds
    assert "jobwarden.tasks.metrics_tallies" in app.conf.include


def test_notification_deliveries_are_routed_to_their_own_queue_and_steps_are_not() -> None:
    # Issue 33, finding 8: a receiver that answers slowly must never hold a poller's seat.
    import jobwarden.tasks.humans.notifications  # noqa: F401 - registers the tasks on the app
    from jobwarden.config.settings import get_settings

    queue = get_settings().queue
    route = app.amqp.router.route
    for task in ("jobwarden.notify", "jobwarden.deliver_notifications"):
        assert route({}, task)["queue"].name == f"{queue}.notifications", task
    for task in ("jobwarden.poll", "jobwarden.sweep", "jobwarden.create", "jobwarden.submit"):
        assert route({}, task)["queue"].name == queue, task


def test_compose_runs_notifications_on_a_worker_of_their_own() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]

    def queues(service: str) -> str:
        entrypoint = [str(part) for part in compose[service]["entrypoint"]]
        return entrypoint[entrypoint.index("-Q") + 1]

    assert queues("worker") == "jobwarden"
    assert queues("notifications") == "jobwarden.notifications"
