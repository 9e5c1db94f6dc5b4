"""scripts/_scale_preload.py (bench_scale.py's filler) names a value for every NOT NULL
column of the tables it copies: a column added without one stops the preload, so it is
checked here, before anyone starts a benchmark that loads 23 GiB."""

from __future__ import annotations

import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def test_the_scale_preload_fills_every_not_null_column_of_the_tables_it_copies() -> None:
    sys.path.insert(0, str(SCRIPTS))
    try:
        import _scale_preload
    finally:
        sys.path.remove(str(SCRIPTS))
    operations, timers, events = _scale_preload.copied_columns()
    assert {"operation_id", "tenant", "priority", "state"} <= set(operations)
    assert "next_poll_at" in timers and "event_id" not in events
