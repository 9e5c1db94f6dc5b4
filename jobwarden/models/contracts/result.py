"""The ``[result]`` table: how a finished job's result is collected and checked.

Its rules read the ``[status]`` already built (where the result reference sits) and the
file's convention (an Azure one finds a url result itself).
"""

from __future__ import annotations

from typing import Annotated, Self
from urllib.parse import urlsplit

from pydantic import ValidationInfo, model_validator

from jobwarden.models.contracts.contract import (
    ChecksumAlgorithm,
    ChecksumEncoding,
    DigestField,
    ResultSpec,
    StatusSpec,
)
from jobwarden.models.contracts.fields import (
    MAX_RESULT_BYTES,
    Flag,
    Fraction,
    Pointer,
    StrList,
    check_str_list,
    choice,
    choice_of,
    count,
    kind,
    problem,
    template,
    toml_type,
)
from jobwarden.models.contracts.sections import ContractTable, context_of, convention_of, default
from jobwarden.models.conventions.strategies import AZURE

__all__ = ["PARTIAL_ENDS", "ResultTable"]

# The ends a job can reach with part of its work done (models/polling/decisions.py maps them).
PARTIAL_ENDS = ("cancelled", "failed", "expired")


# --- [result] -----------------------------------------------------------------------


def _origins(value: object) -> tuple[str, ...]:
    origins = check_str_list(value)
    for index, origin in enumerate(origins):
        parts = urlsplit(origin)
        if (
            parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.path
            or parts.query
            or parts.fragment
            or parts.username
        ):
            raise problem(
                f"must be an origin such as 'https://files.example.com', got {origin!r}",
                field=f"[{index}]",
            )
    return origins


def _digest_fields(value: object) -> tuple[DigestField, ...]:
    names = check_str_list(value)
    if not names:
        raise problem("must list at least one digest field (or be left out)")
    known = {f.value for f in DigestField}
    found: list[DigestField] = []
    for index, name in enumerate(names):
        if name not in known:
            raise problem(f"must be one of: {', '.join(known)}; got {name!r}", field=f"[{index}]")
        if DigestField(name) in found:
            raise problem(f"{name!r} is listed twice", field=f"[{index}]")
        found.append(DigestField(name))
    return tuple(found)


def _content_type(value: object) -> str | None:
    # TOML has no null: an empty content_type means "do not check the content type".
    if not isinstance(value, str):
        raise problem(f"must be a string, got {toml_type(value)}")
    return value or None


class ResultTable(ContractTable):
    """How a finished job's result is collected and checked."""

    builds = ResultSpec
    fetch: Annotated[str, choice_of("url", "inline", "path")]
    """'url' (GET the reference), 'inline' (the status body holds it), 'path' (a template)."""
    path: Annotated[str | None, template("job_id", "result_ref")] = None
    allowed_origins: Annotated[
        tuple[str, ...],
        kind(_origins, {"type": "array", "items": {"type": "string", "format": "uri"}}),
    ] = ()
    """Origins a result URL may point at besides base_url's."""
    content_type: Annotated[str | None, kind(_content_type, {"type": "string"})] = default(
        ResultSpec, "content_type"
    )
    """The result's media type; '' does not check it."""
    digests: Annotated[
        tuple[DigestField, ...],
        kind(
            _digest_fields,
            {
                "type": "array",
                "minItems": 1,
                "uniqueItems": True,
                "items": {"type": "string", "enum": [f.value for f in DigestField]},
            },
        ),
    ] = ()
    """Digest fields of the result response that must verify (any present one is checked)."""
    digests_required: Flag | None = None
    checksum_pointer: Pointer | None = None
    checksum_algorithm: Annotated[ChecksumAlgorithm | None, choice(ChecksumAlgorithm)] = None
    checksum_encoding: Annotated[ChecksumEncoding | None, choice(ChecksumEncoding)] = None
    record_count_pointer: Pointer | None = None
    items_pointer: Pointer | None = None
    next_link_pointer: Pointer | None = None
    """Where a page names the next page's URL: the result is collected page by page."""
    failed_items_pointer: Pointer | None = None
    item_status_pointer: Pointer | None = None
    item_failed_values: StrList = ()
    item_succeeded_values: StrList = ()
    item_error_pointer: Pointer | None = None
    item_status_code_pointer: Pointer | None = None
    item_ref_pointer: Pointer | None = None
    completed_count_pointer: Pointer | None = None
    failed_count_pointer: Pointer | None = None
    total_count_pointer: Pointer | None = None
    error_file_pointer: Pointer | None = None
    error_file_path: Annotated[str | None, template("error_file", needed=("error_file",))] = None
    """GET path of the failed-items file (OpenAI '/v1/files/{error_file}/content')."""
    max_bytes: Annotated[int, count(maximum=MAX_RESULT_BYTES)] = default(ResultSpec, "max_bytes")
    max_failed_fraction: Fraction = default(ResultSpec, "max_failed_fraction")
    jsonl: Flag = False
    """One JSON value per line (OpenAI batch output) rather than one document."""
    single_use: Flag = False
    """The download consumes the result (a one-time link): attempted at most once."""
    url_expiry_pointer: Pointer | None = None
    """Where the status body says when the result URL expires (RFC 3339 or Unix seconds)."""
    refresh_expired_url: Flag = False
    """Past the URL's expiry, read the status again for a fresh URL instead of stopping."""
    partial_after: StrList = ()
    """Ends ('cancelled', 'failed', 'expired') after which partial output is collected."""

    @model_validator(mode="after")
    def _rules(self, info: ValidationInfo) -> Self:
        if self.fetch == "path" and self.path is None:
            raise problem("required when result.fetch = 'path'", field="path")
        if self.fetch != "path" and self.path is not None:
            raise problem("only allowed when result.fetch = 'path'", field="path")
        self._result_reference(info)
        if self.jsonl and self.items_pointer is not None:
            raise problem(
                "not allowed with jsonl = true: every line is an item", field="items_pointer"
            )
        self._paging_rules()
        if self.digests and self.fetch == "inline":
            raise problem("needs a result response; fetch = 'inline' has none", field="digests")
        if self.digests_required is not None and not self.digests:
            raise problem("only allowed with result.digests", field="digests_required")
        for key in ("checksum_algorithm", "checksum_encoding"):
            if getattr(self, key) is not None and self.checksum_pointer is None:
                raise problem("only allowed with result.checksum_pointer", field=key)
        self._item_rules()
        for index, end in enumerate(self.partial_after):
            if end not in PARTIAL_ENDS:
                raise problem(
                    f"must be one of: {', '.join(PARTIAL_ENDS)}; got {end!r}",
                    field=f"partial_after[{index}]",
                )
        if self.refresh_expired_url and self.url_expiry_pointer is None:
            raise problem(
                "only allowed with result.url_expiry_pointer", field="refresh_expired_url"
            )
        if self.fetch == "inline" and (self.single_use or self.url_expiry_pointer is not None):
            # An inline result is read from the status body: there is no download to bound.
            field = "single_use" if self.single_use else "url_expiry_pointer"
            raise problem("needs a result download; fetch = 'inline' has none", field=field)
        return self

    def _result_reference(self, info: ValidationInfo) -> None:
        status: StatusSpec | None = context_of(info).get("status")
        convention = convention_of(info)
        needs_ref = self.fetch in ("url", "inline") or (
            self.path is not None and "{result_ref}" in self.path
        )
        # "" is a pointer too: the whole status body is the result (RFC 6901 section 5).
        # An Azure convention finds a url result itself: the monitor's resourceLocation,
        # the Location, the original URI or the final answer (models/conventions/strategies.py).
        if (convention is None or convention in AZURE) and self.fetch == "url":
            needs_ref = False
        if needs_ref and status is not None and status.result_ref_pointer is None:
            raise problem(
                f"required when result.fetch = '{self.fetch}'"
                + (" and result.path uses {result_ref}" if self.fetch == "path" else ""),
                field="status.result_ref_pointer",
                absolute=True,
            )

    def _paging_rules(self) -> None:
        """A page is a JSON object holding its items and the next page's URL apart."""
        link = self.next_link_pointer
        if link is None:
            return
        if link == "":
            raise problem(
                "must point inside a page (such as '/nextLink'), not at the whole page",
                field="next_link_pointer",
            )
        if self.jsonl:
            raise problem(
                "not allowed with jsonl = true: a JSON Lines result has no next link",
                field="next_link_pointer",
            )
        items = self.items_pointer if self.items_pointer is not None else "/value"
        if items == "":
            raise problem(
                "must point inside a page when result.next_link_pointer is set "
                "(a page holds its items and its next link)",
                field="items_pointer",
            )
        if link == items or link.startswith(items + "/") or items.startswith(link + "/"):
            raise problem(f"must not overlap the items at {items!r}", field="next_link_pointer")

    def _item_rules(self) -> None:
        """How each item's outcome is read, and the counts the status body declares."""
        if bool(self.item_status_pointer) != bool(self.item_failed_values):
            raise problem(
                "item_status_pointer and item_failed_values go together",
                field="item_failed_values",
            )
        if self.item_succeeded_values and not self.item_status_pointer:
            raise problem(
                "only allowed with result.item_status_pointer", field="item_succeeded_values"
            )
        overlap = sorted(set(self.item_failed_values) & set(self.item_succeeded_values))
        if overlap:
            raise problem(
                f"{overlap[0]!r} is also an item_failed_values", field="item_succeeded_values"
            )
        if self.error_file_path is not None and self.error_file_pointer is None:
            raise problem("needs result.error_file_pointer", field="error_file_path")
        if self.error_file_pointer is not None and self.failed_count_pointer is None:
            # The failed lines are elsewhere: only the declared count says how many there are.
            raise problem("needs result.failed_count_pointer", field="error_file_pointer")

    def spec(self) -> ResultSpec:
        values = {name: getattr(self, name) for name in type(self).model_fields}
        for key in ("digests_required", "checksum_algorithm", "checksum_encoding"):
            if values[key] is None:
                values[key] = default(ResultSpec, key)
        return ResultSpec(**values)
