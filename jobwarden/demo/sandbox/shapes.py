"""Business shapes of the sandbox's jobs: payments and deploys (issue 40's follow-ups).

A command whose ``kind`` names a shape gets that shape's facts in its result document,
beside the usual records, so a follow-up can be checked against what the provider
confirmed rather than what was asked:

* payments: ``payment_intent`` -> ``capture`` -> ``refund``: the result states the
  ``amount`` (whole minor units) and ``currency`` the job moved, as a payment API's
  capture or refund object does (``amount_captured``, ``amount_refunded``).
* deploys: ``deploy`` and ``rollback``: the result names the ``service`` and the
  ``deployed_ref`` (the commit it runs). A deploy scripted to fail its health checks
  (``behaviour.result_failed_items`` past the contract's ``max_failed_fraction``) ends
  ``result_validation_failed``, which sandbox_deploy.toml's rollback rule follows up.
"""

from __future__ import annotations

from typing import Any, Final

PAYMENTS: Final = frozenset({"payment_intent", "capture", "refund"})
DEPLOYS: Final = frozenset({"deploy", "rollback"})


def shape_fields(command: dict[str, Any]) -> dict[str, Any]:
    """The facts the command's shape adds to its result document (none for other kinds)."""
    kind = command.get("kind")
    if kind in PAYMENTS:
        return {
            "object": kind,
            "amount": command.get("amount"),
            "currency": command.get("currency"),
        }
    if kind in DEPLOYS:
        return {
            "object": kind,
            "service": command.get("service"),
            "deployed_ref": command.get("ref"),
        }
    return {}
