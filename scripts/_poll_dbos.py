"""DBOS Transact's own durable poll loop: issue 37's "against DBOS" system in
scripts/bench_poll.py (``--dbos PYTHON``).

Run with the Python of DBOS's venv (scripts/install_dbos), never jobwarden's: DBOS pins its
own SQLAlchemy and psycopg. Nothing of jobwarden's is imported here; ``SCHEMA`` is read
by the bench (jobwarden's venv), so ``dbos`` and ``httpx`` are imported in ``main`` only.

The loop is the one DBOS's documentation teaches for waiting on remote work: a workflow
whose body is ``for each poll: status = step(GET); DBOS.sleep(wait)``. Each step's output
and each durable sleep is a row DBOS writes before going on, so a crash resumes the loop
where it stopped (DBOS's promise, as jobwarden's history is its).

The bench starts a round with ``NOTIFY`` on ``CHANNEL`` (the round's operations as JSON);
each of the system's processes starts its share of them (``BENCH_DBOS_INDEX`` of
``BENCH_DBOS_PROCESSES``) with ``DBOS.start_workflow``, at most ``BENCH_DBOS_THREADS``
loops running at once. No DBOS queue: a queue is polled (every second by default), which
would charge DBOS for waiting or for polling; started directly, it does neither, its best
case. Each workflow's last step marks its row ``done`` with the number of polls, as the
floors' last poll does, so the bench counts and waits alike for every system. Configured
from the BENCH_FLOOR_* variables the floors read, plus BENCH_DBOS_URL (DBOS's system
database: the system's own scratch database).
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

CHANNEL = "jwbench_dbos_round"
# The bench's table: one row per operation of each round (the floors' shape).
SCHEMA = """
CREATE TABLE IF NOT EXISTS dbos_ops (
    id integer PRIMARY KEY, job_id text NOT NULL, round integer NOT NULL,
    polls integer NOT NULL DEFAULT 0, done boolean NOT NULL DEFAULT false
);
"""
READY = "dbos bench worker ready."  # printed once DBOS has launched (and LISTENs)
WAIT_SECONDS = 0.001  # the bench contract's wait between polls (scripts/_bench_support.py)
FINISHED = frozenset({"succeeded", "failed", "cancelled", "expired"})


def main() -> None:
    import httpx
    import psycopg
    from dbos import DBOS, DBOSConfig

    dsn = os.environ["BENCH_FLOOR_DSN"]
    config: DBOSConfig = {
        "name": "jwbench-dbos",
        "system_database_url": os.environ["BENCH_DBOS_URL"],
        "log_level": "WARNING",
        # One executor per process (recovery is per executor; the default id is shared).
        "executor_id": f"bench-{os.getpid()}",
    }
    DBOS(config=config)
    running = threading.BoundedSemaphore(int(os.environ.get("BENCH_DBOS_THREADS", "4")))
    local = threading.local()

    def http() -> httpx.Client:
        client: httpx.Client | None = getattr(local, "http", None)
        if client is None:
            client = local.http = httpx.Client(
                base_url=os.environ["BENCH_FLOOR_SANDBOX"],
                headers={"Authorization": f"Bearer {os.environ['BENCH_FLOOR_TOKEN']}"},
                timeout=10.0,
            )
        return client

    def db() -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(local, "db", None)
        if conn is None:
            conn = local.db = psycopg.connect(dsn, autocommit=True)
        return conn

    @DBOS.step()
    def job_status(job_id: str) -> str | None:
        # As the floors read it: the sandbox job's status, whatever the HTTP status.
        status: str | None = http().get(f"/v1/jobs/{job_id}").json().get("status")
        return status

    @DBOS.step()
    def mark_done(op_id: int, polls: int) -> None:
        db().execute("UPDATE dbos_ops SET done = true, polls = %s WHERE id = %s", (polls, op_id))

    @DBOS.workflow()
    def poll(op_id: int, job_id: str, budget: int) -> int:
        polls = 0
        with running:  # at most BENCH_DBOS_THREADS loops at once; the rest wait their turn
            while polls < budget:
                status = job_status(job_id)
                polls += 1
                if status in FINISHED:
                    break
                DBOS.sleep(WAIT_SECONDS)
        mark_done(op_id, polls)
        return polls

    DBOS.launch()
    share, of = int(os.environ["BENCH_DBOS_INDEX"]), int(os.environ["BENCH_DBOS_PROCESSES"])
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        print(READY, flush=True)
        for note in conn.notifies():
            round_: dict[str, Any] = json.loads(note.payload)
            for n, (op_id, job_id) in enumerate(round_["operations"]):
                if n % of == share:
                    DBOS.start_workflow(poll, op_id, job_id, round_["polls"])


if __name__ == "__main__":
    main()
