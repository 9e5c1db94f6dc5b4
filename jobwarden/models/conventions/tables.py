"""What each convention supplies to a contract file, written as the file would write it.

A contract that names a ``convention`` may leave out what the convention's public
spec fixes; the loader merges these tables into the file before validating it, so a
supplied value meets the same models, the same rules and the same messages as one
typed by hand, and ``jobwarden providers check`` judges the merged file. The file
always wins: a key it gives replaces the convention's, and a table it gives whole
(``[states]``, ``[result]``) replaces the convention's table whole, so a provider that
departs from the spec says so in its own file.

Sources, named per table below:

- [ARM] ARM RPC, "Asynchronous operations"; [LRO] Azure REST API Guidelines,
  "Long-running operations" (the polling strategy itself is ``models/conventions/strategies.py``).
- [AIP-151] Google AIP-151 "Long-running operations": ``google.longrunning.Operation``
  {name, metadata, done, error (google.rpc.Status), response}; "If done is false the
  operation is still in progress; if true, either error or response is available".
  Proto3 JSON omits ``done`` while it is false. [RPC-CODE] google.rpc.Code.
- [OPENAI] The OpenAI API reference, "Batch" object (also openai-python's
  ``types/batch.py``, generated from OpenAI's OpenAPI spec): ``status`` is one of
  validating, failed, in_progress, finalizing, completed, expired, cancelling,
  cancelled; ``output_file_id`` / ``error_file_id``; ``expires_at`` (Unix seconds);
  ``request_counts`` {total, completed, failed}; output lines
  {id, custom_id, response {status_code, request_id, body}, error}.

Pure data and one pure merge; nothing here reads a file or the environment.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from jobwarden.models.contracts.contract import Convention

__all__ = ["SUPPLIED", "WHOLE_TABLES", "with_convention_tables"]

_AZURE_STATES: Final[Mapping[str, object]] = {
    # [ARM] only Succeeded, Failed and Canceled are terminal; every other
    # provisioningState (and [LRO] status) is still running. azure-core compares the
    # three without case (its _FINISHED / _FAILED sets).
    "pending": ["NotStarted", "Running", "InProgress", "Accepted"],
    "succeeded": ["Succeeded"],
    "failed": ["Failed"],
    "cancelled": ["Canceled", "Cancelled"],
    "otherwise": "pending",
    "case_insensitive": True,
}
_AZURE: Final[Mapping[str, Mapping[str, object]]] = {
    # The convention's strategy finds the monitor from the create answer's headers.
    "create": {"job_locator": "convention"},
    "states": _AZURE_STATES,
    # [LRO] / [ARM]: the final result is JSON, read where the final state lives.
    "result": {"fetch": "url"},
}

SUPPLIED: Final[Mapping[Convention, Mapping[str, Mapping[str, object]]]] = {
    Convention.plain: {},
    Convention.azure_lro: _AZURE,
    Convention.azure_arm: _AZURE,
    Convention.google_aip151: {
        # [AIP-151] a create returns an Operation; its name is the job, placed into the
        # status and cancel paths as is ("operations/abc": models/routes keeps the '/').
        "create": {"job_locator": "body", "job_id_pointer": "/name"},
        "status": {
            "state_pointer": "/done",
            "state_default": "false",  # proto3 JSON omits done while it is false
            "error_pointer": "/error",  # a google.rpc.Status: done, and failed
            "error_code_pointer": "/error/code",
            "result_ref_pointer": "/response",  # the result itself (fetch = "inline")
        },
        "states": {
            "pending": ["false"],
            "succeeded": ["true"],  # only when /error is absent
            "failed": [],  # [AIP-151] no failed value: failure is done + error
            # [RPC-CODE] what a done operation's error really is.
            "error_codes": {"1": "cancelled", "4": "expired"},  # CANCELLED, DEADLINE_EXCEEDED
        },
        "result": {"fetch": "inline"},
    },
    Convention.openai_batch: {
        "create": {"job_locator": "body", "job_id_pointer": "/id"},  # "batch_..."
        "status": {
            "state_pointer": "/status",
            "result_ref_pointer": "/output_file_id",
            "expiry_pointer": "/expires_at",
            # [OPENAI] in_progress_at (Unix seconds) and request_counts: the batch's pace,
            # so the next poll can aim at the finish two readings agree on.
            "started_at_pointer": "/in_progress_at",
            "items_completed_pointer": "/request_counts/completed",
            "items_failed_pointer": "/request_counts/failed",
            "items_total_pointer": "/request_counts/total",
        },
        "states": {
            "pending": ["validating", "in_progress", "finalizing"],
            "cancelling": ["cancelling"],
            "succeeded": ["completed"],
            "failed": ["failed"],
            "expired": ["expired"],
            "cancelled": ["cancelled"],
        },
        "result": {
            # [OPENAI] Files API: GET /v1/files/{file_id}/content, one JSON line per request.
            "fetch": "path",
            "path": "/v1/files/{result_ref}/content",
            "jsonl": True,
            "content_type": "",  # the file endpoint's type is not a JSON type
            "item_error_pointer": "/error",
            "item_status_code_pointer": "/response/status_code",
            "item_ref_pointer": "/custom_id",
            "completed_count_pointer": "/request_counts/completed",
            "failed_count_pointer": "/request_counts/failed",
            "total_count_pointer": "/request_counts/total",
            "error_file_pointer": "/error_file_id",
            # The same Files API for the failed requests' lines (error_file_id).
            "error_file_path": "/v1/files/{error_file}/content",
            # [OPENAI] Batch guide: a cancelled or expired batch keeps its completed lines.
            "partial_after": ("cancelled", "expired"),
        },
    },
}

# Tables a file replaces whole when it has them: a state table or a result rule half
# from the spec and half from the file would mean something neither said.
WHOLE_TABLES: Final = frozenset({"states", "result"})

# A supplied key that belongs to another: taken only when the file took that one too
# (a file with its own state_pointer has its own idea of the state's default).
_BELONGS_TO: Final[Mapping[tuple[str, str], str]] = {("status", "state_default"): "state_pointer"}


def with_convention_tables(
    data: Mapping[str, object], convention: Convention | None
) -> dict[str, object]:
    """The file's tables with what ``convention`` supplies where the file said nothing.

    ``None`` (the file's own convention is broken; that error is reported) supplies
    nothing. A table the file gives as something other than a table is left for the
    loader to refuse.
    """
    merged = dict(data)
    for table, supplied in SUPPLIED.get(convention, {}).items() if convention else ():
        given = data.get(table)
        if given is None:
            merged[table] = dict(supplied)
        elif isinstance(given, dict) and table not in WHOLE_TABLES:
            taken = {
                key: value
                for key, value in supplied.items()
                if key not in given
                and ((table, key) not in _BELONGS_TO or _BELONGS_TO[table, key] not in given)
            }
            merged[table] = {**taken, **given}
    return merged
