"""Beat's fold of the /metrics deltas into their totals (models/persistence/metrics_tables.py).

Every write of provider answers, and every operation that ends, appends a delta row; a
scrape adds up the totals and the deltas since the last fold. This task folds them, so
what a scrape sums stays bounded by one fold interval of writes, however long the
history. A fold missed (no beat for a while) costs the next scrape more, never a wrong
figure.
"""

from __future__ import annotations

from jobwarden.config.celery_app import app
from jobwarden.config.settings import get_settings
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.metrics_store import fold_tallies
from jobwarden.observability.logs import get_logger

log = get_logger(__name__)


@app.task(name="jobwarden.fold_tallies", ignore_result=True)
def fold() -> int:
    with transaction(get_settings().database_url) as session:
        folded = fold_tallies(session)
    if folded:
        log.debug("tallies_folded", rows=folded)
    return folded
