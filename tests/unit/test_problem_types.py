"""Every problem kind has a stable RFC 9457 type and is listed in docs/api.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobwarden.api.problems import TITLES, ProblemError, problem_body

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
DOCUMENTED = set(re.findall(r"^\| `([a-z_]+)` \| (\d{3}) \|", DOCS, flags=re.M))


@pytest.mark.parametrize("kind", sorted(TITLES))
def test_every_problem_kind_is_documented_in_docs_api_md(kind: str) -> None:
    assert kind in {k for k, _ in DOCUMENTED}, f"add `{kind}` to the kinds table of docs/api.md"


def test_the_docs_list_no_kind_the_code_does_not_have() -> None:
    assert {k for k, _ in DOCUMENTED} - set(TITLES) == set()


def test_a_problem_body_has_the_rfc_9457_members_and_its_extensions() -> None:
    body = problem_body(
        422, "invalid_request", "command: required", instance="/v1/x", extensions={"errors": []}
    )
    assert body == {
        "type": "tag:jobwarden.dev,2026:problem/invalid_request",
        "title": TITLES["invalid_request"],
        "status": 422,
        "detail": "command: required",
        "instance": "/v1/x",
        "errors": [],
    }


def test_an_extension_cannot_overwrite_a_standard_member() -> None:
    body = problem_body(400, "bad_request", "d", extensions={"status": 200, "type": "x"})
    assert (body["status"], body["type"]) == (400, "tag:jobwarden.dev,2026:problem/bad_request")


def test_an_unknown_kind_fails_when_raised() -> None:
    with pytest.raises(ValueError, match="unknown problem kind"):
        ProblemError(400, "no_such_kind", "detail")
