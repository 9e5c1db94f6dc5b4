"""The generated references say what the code serves (issue 36, point 12).

scripts/gen_docs.py reads the metric families from the collectors' source; here the
collectors run against Postgres and Redis and must build exactly those families. And the
front pages outside the docs site (README, CONTRIBUTING), which mkdocs does not check,
link only to files that exist.
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
try:
    import gen_docs
finally:
    sys.path.pop(0)


def test_the_metrics_reference_is_every_family_the_collectors_build(database_url: str) -> None:
    from jobwarden.config.settings import get_settings
    from jobwarden.observability.metrics import WebhookRefusalCollector, collect_families
    from jobwarden.tasks.provider.rate_limits import share_counts
    from jobwarden.tasks.provider.webhooks import refusal_counts

    settings = get_settings()
    # Built as the API builds it (api/app.py): with the rate limiter's fair-share counts.
    refusals = WebhookRefusalCollector(
        settings.redis_url, settings.key_prefix, counts=refusal_counts, shares=share_counts
    )
    try:
        served = [*collect_families(database_url, datetime.now(UTC)), *refusals.collect()]
    finally:
        refusals.close()
    built = {
        (f.name, f.type, tuple(getattr(f, "_labelnames", ())), f.documentation) for f in served
    }
    documented = {
        (name, kind.replace(" ", ""), tuple(labels), help_text)
        for name, kind, labels, help_text, _ in gen_docs.metric_families()
    }
    assert documented == built


@pytest.mark.parametrize("page", ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"])
def test_every_relative_link_of_a_front_page_resolves(page: str) -> None:
    text = (REPO / page).read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [t.split("#", 1)[0] for t in targets if not re.match(r"[a-z]+:", t)]
    missing = [t for t in relative if t and not (REPO / t).exists()]
    assert missing == []
